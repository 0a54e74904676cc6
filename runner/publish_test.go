package runner

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/payload"
)

// TestPublish: which agent calls a publish makes, and that it makes them
// at once. The result rides on the build's meta-data when it fits, and
// only the files that need an artifact are uploaded (a test run's
// publish uploads nothing: the agent's uploader costs a second a job,
// issue 18). The stand-in agent fails any call that is not running while
// the others start, so a publish that makes them one after another fails.
func TestPublish(t *testing.T) {
	t.Parallel()
	small := `{"success": true, "error": "", "runs": {}}`
	tests := []struct {
		name    string
		result  string
		extra   []string // files beside result.json
		calls   []string // the agent calls made, sorted
		uploads []string // the artifact upload's files
	}{
		{"test run: meta-data, no upload", small, nil, []string{"annotate", "meta-data"}, nil},
		{"timed run: noise.json uploaded, result.json not", small, []string{"noise.json"}, []string{"annotate", "artifact", "meta-data"}, []string{"noise.json"}},
		{"profile: its zip uploaded", small, []string{"profile_data/profile.0.zip"}, []string{"annotate", "artifact", "meta-data"}, []string{"profile_data/profile.0.zip"}},
		{"too large for meta-data: result.json uploaded", largeResult(t), []string{"noise.json"}, []string{"annotate", "artifact"}, []string{"result.json", "noise.json"}},
	}
	bin, err := filepath.Abs(filepath.Join("testdata", "concurrent-agent", bkagent.Binary))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			logDir, dir := t.TempDir(), t.TempDir()
			out := filepath.Join(dir, "result.json")
			if err := os.WriteFile(out, []byte(tt.result), 0o644); err != nil {
				t.Fatal(err)
			}
			env := []string{"BK_LOG_DIR=" + logDir, "BK_EXPECT=" + strings.Join(tt.calls, " "), "BUILDKITE_JOB_ID=0190-job", "PATH=/usr/bin:/bin"}
			agent := &bkagent.Agent{Path: bin, Env: env}
			files := append([]string{"result.json"}, tt.extra...)
			if err := Publish(context.Background(), agent, out, files, payload.ModeTest, &payload.FullResult{Success: true}, ""); err != nil {
				t.Fatalf("publish: %v", err)
			}
			started, _ := filepath.Glob(filepath.Join(logDir, "*.started"))
			var calls []string
			for _, s := range started {
				calls = append(calls, strings.TrimSuffix(filepath.Base(s), ".started"))
			}
			if !slices.Equal(calls, tt.calls) {
				t.Errorf("calls %v, want %v", calls, tt.calls)
			}
			if tt.uploads != nil {
				args, err := os.ReadFile(filepath.Join(logDir, "artifact.args"))
				if err != nil || !strings.Contains(string(args), "\n"+strings.Join(tt.uploads, ";")+"\n") {
					t.Errorf("artifact upload args %q (%v), want the files %v", args, err, tt.uploads)
				}
			}
		})
	}
}

// largeResult is a result.json that compresses to more than the meta-data
// limit (random bytes do not compress).
func largeResult(t *testing.T) string {
	t.Helper()
	b := make([]byte, 120<<10)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return `{"success": true, "error": "` + base64.StdEncoding.EncodeToString(b) + `", "runs": {}}`
}
