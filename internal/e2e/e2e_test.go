package e2e

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/payload"
)

// comparable is what must agree between two runs of one job: everything
// but timings, host names, paths and the system it ran on.
func comparable(t *testing.T, raw string) map[string]any {
	t.Helper()
	var res payload.FullResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(raw)), &res); err != nil {
		t.Fatalf("not a FullResult: %v\n%s", err, raw)
	}
	out := map[string]any{"success": res.Success, "error": res.Error}
	for name, run := range res.Runs {
		r := map[string]any{"compilation": run.Compilation != nil}
		if run.Run != nil {
			r["run.success"] = run.Run.Success
			r["run.passed"] = run.Run.Passed
			r["run.exit_code"] = run.Run.ExitCode
			r["run.stdout"] = run.Run.Stdout
			r["run.stderr"] = run.Run.Stderr
			r["run.result"] = run.Run.Result
		}
		out["runs."+name] = r
	}
	return out
}

// TestSubmitExample: kbgen submit of the example job through the local
// Buildkite gives the FullResult kbgen local gives (timings aside); the
// bootstrap ran on the control queue, the eval step on the vendor queue.
func TestSubmitExample(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	got := h.run(h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--mode", "test", "--run-id", "e2e-example", "--timeout", "3m")
	if got.code != 0 {
		t.Fatalf("submit: exit %d\n%s\n%s\njobs: %+v", got.code, got.stdout, got.stderr, h.srv.AllJobs())
	}
	want := h.run(nil, "local", "--example", "vectoradd", "--mode", "test", "--json")
	if g, w := comparable(t, got.stdout), comparable(t, want.stdout); !reflect.DeepEqual(g, w) {
		t.Errorf("submit's FullResult differs from kbgen local's:\nsubmit: %v\nlocal:  %v", g, w)
	}
	jobs := h.srv.Jobs(1)
	if len(jobs) != 2 {
		t.Fatalf("%d jobs, want bootstrap and eval: %+v", len(jobs), jobs)
	}
	if j := jobs[0]; j.Key != "bootstrap" || j.Queue != controlQueue || j.Agent != "control-1" || j.State != "passed" {
		t.Errorf("bootstrap job %s on queue %s agent %s: %s", j.Key, j.Queue, j.Agent, j.State)
	}
	if j := jobs[1]; j.Key != "eval" || j.Queue != vendorQueue || !strings.HasPrefix(j.Agent, "node-gpu") || j.State != "passed" {
		t.Errorf("eval job %s on queue %s agent %s: %s\n%s", j.Key, j.Queue, j.Agent, j.State, tail(j.Log, 30))
	}
	t.Logf("stderr of submit:\n%s", got.stderr)
}
