package resultfile

import (
	"encoding/base64"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/payload"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "sub", "result.json")
	zipBytes := []byte("PK\x03\x04 not really a zip")
	res := &payload.FullResult{Success: true, Error: "a <b> & c", Runs: map[string]payload.EvalResult{
		"profile.0": {Profile: &payload.ProfileResult{Profiler: "ncu", Trace: base64.StdEncoding.EncodeToString(zipBytes)}},
		"test":      {},
	}}
	files, err := Write(out, res)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(files, []string{"result.json", "profile_data/profile.0.zip"}) {
		t.Errorf("files %v", files)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"error": "a <b> & c"`) {
		t.Errorf("HTML characters escaped or not indented as Python writes them:\n%s", b)
	}
	if z, _ := os.ReadFile(filepath.Join(dir, "sub", "profile_data", "profile.0.zip")); string(z) != string(zipBytes) {
		t.Errorf("profile zip %q", z)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "sub", ".result.json.*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}
