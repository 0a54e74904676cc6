package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

// TestDoctorBuildkiteRealAgents: kbgen doctor --buildkite against the local
// Buildkite with real agents registered (a control agent, the node's two,
// tagged and versioned by buildkite-agent itself): the queues and versions
// pass; the pipeline's steps are the repository's .buildkite/pipeline.yml,
// which routes the bootstrap by the build env, and doctor says so; with
// the documented settings steps everything passes and a build still runs
// on them.
func TestDoctorBuildkiteRealAgents(t *testing.T) {
	h := newHarness(t, harnessOpts{})
	doctor := func() cliResult { return h.run(h.cliEnv(), "doctor", "--buildkite", "--timeout", "1m") }
	r := doctor()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(r.stdout, "2 connected") && time.Now().Before(deadline); r = doctor() {
		time.Sleep(time.Second) // the agents register in their own time
	}
	for _, want := range []string{
		"PASS  queue kernelbot-control: control queue: 1 connected",
		"PASS  queue " + vendorQueue + ": 2 connected",
		"PASS  agent versions: 3 agents on kbgen's queues",
		`FAIL  settings steps: the bootstrap's queue "${KERNELBOT_BOOTSTRAP_QUEUE:-${KERNELBOT_QUEUE:-default}}" comes from the build's env`,
	} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("doctor --buildkite output lacks %q:\n%s%s", want, r.stdout, r.stderr)
		}
	}
	if r.code != 1 {
		t.Errorf("exit %d with a failed check, want 1", r.code)
	}

	p := fakebuildkite.NewPipelineSettings()
	p.Configuration, p.TriggerMode, p.BuildPullRequests = string(kbgen.PipelineSettings), "none", false
	h.srv.SetPipelineSettings(p)
	if r := doctor(); r.code != 0 || !strings.Contains(r.stdout, "PASS  settings steps: ") {
		t.Fatalf("doctor --buildkite with the documented settings: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	got := h.run(h.cliEnv(), "submit", "--queue", vendorQueue, "--example", "vectoradd", "--mode", "test", "--run-id", "e2e-doctor", "--timeout", "3m")
	if got.code != 0 || !strings.Contains(got.stdout, `"success": true`) && !strings.Contains(got.stdout, `"success":true`) {
		t.Errorf("a build on the documented settings steps: exit %d\n%s%s", got.code, got.stdout, got.stderr)
	}
}
