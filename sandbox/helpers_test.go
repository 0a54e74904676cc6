package sandbox

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/buildkite/go-pipeline"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/seal"
)

// lookup turns a map into an env lookup function.
var lookup = contract.MapLookup

// sealerMain is the test binary run by testdata/fake-docker as the sealing
// runner (KBGEN_TEST_SEALER names the steering dir): the key from stdin,
// the envelope of the files `result` (default a passing result) and
// `noise` (when present) on stdout.
func sealerMain(dir string) int {
	key, err := seal.ReadKey(os.Stdin)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	c := seal.Contents{Result: []byte(`{"success": true, "error": "", "system": {}, "runs": {}}` + "\n")}
	if b, err := os.ReadFile(filepath.Join(dir, "result")); err == nil {
		c.Result = b
	}
	if b, err := os.ReadFile(filepath.Join(dir, "noise")); err == nil {
		c.Noise = b
	}
	if err := seal.Write(os.Stdout, key, c); err != nil {
		return 1
	}
	return 0
}

// sealing makes the stand-in docker seal a result as the runner would.
func sealing(t *testing.T, dir string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	touch(t, dir, "sealer", self)
}

// encodedPyJob is the encoded payload of a test-mode Python job of one
// case: submission.py and the harness eval.py as given. The attack tests
// run the submission's own code as the "kernel" under a harness that does
// nothing ("exit 0").
func encodedPyJob(t *testing.T, submission, harness string) string {
	t.Helper()
	job, err := json.Marshal(map[string]any{
		"lang": "py", "mode": "test", "main": "eval.py", "tests": []map[string]any{{"n": 1}},
		"sources": map[string]string{"submission.py": submission, "eval.py": harness},
	})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := payload.Encode(job)
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// exampleEvalStep is the eval step the generator makes for a vendor's
// built-in example job (its leaderboard mode where the queue allows it).
func exampleEvalStep(t *testing.T, v *registry.Vendor) *pipeline.CommandStep {
	t.Helper()
	job, err := pipelinegen.ExampleJobFor(v, v.PreferMode(payload.ModeLeaderboard))
	if err != nil {
		t.Fatal(err)
	}
	p, err := pipelinegen.Generate(pipelinegen.Job{Input: job, Queue: v.Queue, RunID: "run-42"}, v, pipelinegen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return p.Steps[0].(*pipeline.CommandStep)
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
