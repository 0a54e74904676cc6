package runner

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/payload"
)

// TestPublishMakesItsCallsAtOnce: the artifact upload, the annotation and
// the result meta-data are three agent processes the eval job waits for
// after the container exits; the stand-in agent fails any call that is
// not running while the other two start, so a publish that makes them one
// after another fails here (issue 18: per-job overhead).
func TestPublishMakesItsCallsAtOnce(t *testing.T) {
	t.Parallel()
	bin, err := filepath.Abs(filepath.Join("testdata", "concurrent-agent", bkagent.Binary))
	if err != nil {
		t.Fatal(err)
	}
	logDir, dir := t.TempDir(), t.TempDir()
	out := filepath.Join(dir, "result.json")
	if err := os.WriteFile(out, []byte(`{"success": true, "error": "", "runs": {}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	agent := &bkagent.Agent{Path: bin, Env: []string{"BK_LOG_DIR=" + logDir, "BUILDKITE_JOB_ID=0190-job", "PATH=/usr/bin:/bin"}}
	res := &payload.FullResult{Success: true}
	if err := Publish(context.Background(), agent, out, []string{"result.json"}, payload.ModeTest, res, ""); err != nil {
		t.Fatalf("publish: %v", err)
	}
	for _, call := range []string{"artifact", "annotate", "meta-data"} {
		if _, err := os.Stat(filepath.Join(logDir, call+".started")); err != nil {
			t.Errorf("no %s call: %v", call, err)
		}
	}
}
