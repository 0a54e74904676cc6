package e2e

import (
	"bytes"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// tamper is a compromised Buildkite: it changes the eval step of an
// uploaded (already signed) pipeline by its run id, and leaves any other
// pipeline as the agent sent it.
func tamper(pipelineJSON []byte) []byte {
	var doc map[string]any
	dec := json.NewDecoder(bytes.NewReader(pipelineJSON))
	dec.UseNumber()
	if dec.Decode(&doc) != nil {
		return pipelineJSON
	}
	list, _ := doc["steps"].([]any)
	for _, s := range list {
		step, _ := s.(map[string]any)
		env, _ := step["env"].(map[string]any)
		switch env[contract.EnvRunID] {
		case "e2e-tamper-image":
			// Another image, as a backend pushing its own code would.
			for _, p := range step["plugins"].([]any) {
				for _, cfg := range p.(map[string]any) {
					cfg.(map[string]any)["image"] = "kbgen-test-evil:e2e"
				}
			}
		case "e2e-tamper-env":
			// A step moved onto another run's result (it would run fine).
			env[contract.EnvRunID] = "e2e-someone-else"
		default:
			continue
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return pipelineJSON
	}
	return out
}

// TestStepChangedAfterSigning: the control agent signs the eval step; the
// local Buildkite changes it after the upload (its image, or its env). On
// the vendor's agent kbgen sandbox refuses it with 65 before any container
// starts, and the build fails for that reason; an untouched signed step in
// the same run still passes. buildkite-agent v3.52.1 cannot verify a step
// with a plugin itself (TestLiveSignedSteps, docs/security.md).
func TestStepChangedAfterSigning(t *testing.T) {
	h := newHarness(t, harnessOpts{rewriteUpload: tamper})
	runs := []string{"e2e-tamper-image", "e2e-tamper-env", "e2e-untouched"}
	results := make([]cliResult, len(runs))
	var wg sync.WaitGroup
	for i, id := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i] = h.run(h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--mode", "test", "--run-id", id, "--timeout", "3m", "--quiet")
		}()
	}
	wg.Wait()
	for num := 1; num <= len(runs); num++ {
		env, _, _ := h.srv.CreatedEnv(num)
		id := env[contract.EnvRunID]
		i := map[string]int{runs[0]: 0, runs[1]: 1, runs[2]: 2}[id]
		r := results[i]
		var eval *int
		var log string
		for _, j := range h.srv.Jobs(num) {
			if j.Key == "eval" {
				eval, log = j.Exit, j.Log
			}
		}
		if id == "e2e-untouched" {
			if r.code != 0 || eval == nil || *eval != 0 {
				t.Errorf("%s: submit exit %d, eval exit %v; want the signed step to pass\n%s\n%s", id, r.code, eval, tail(r.stderr, 10), tail(log, 20))
			}
			continue
		}
		if eval == nil || *eval != 65 {
			t.Errorf("%s: eval exit %v, want 65\n%s", id, eval, tail(log, 20))
		}
		if !strings.Contains(log, "refusing the step: it was changed after signing") {
			t.Errorf("%s: the job log does not say why it was refused:\n%s", id, tail(log, 20))
		}
		if strings.Contains(log, "kbgen sandbox: kbgen-") {
			t.Errorf("%s: a container was started for a tampered step:\n%s", id, tail(log, 20))
		}
		if r.code != 3 || !strings.Contains(r.stdout, "exit status 65") {
			t.Errorf("%s: submit exit %d, stdout %s; want 3 and a FullResult naming exit status 65", id, r.code, r.stdout)
		}
		if n := len(h.srv.Jobs(num)); n != 2 {
			t.Errorf("%s: %d jobs; a tampered step must not be retried (65 is not an infrastructure exit)", id, n)
		}
	}
}
