package node

import (
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/sandbox"
)

// TestJobEnvReproducesAStep: the placement plus JobEnv is all the sandbox
// needs to plan the job (the reproduce-by-hand recipe failed on every
// machine: no plugin config, no payload); no plan queue, or a queue the
// registry lacks, is said plainly.
func TestJobEnvReproducesAStep(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	p := planFixture(t, "h100x8", defaultOpts)
	p.Queue = "nvidia-h100"
	job, err := JobEnv(p, reg)
	if err != nil {
		t.Fatal(err)
	}
	env := append(p.Agent(3).Env(p.Runtime, p.CgroupVersion), job...)
	lookup := func(k string) (string, bool) {
		for _, e := range env {
			if e.Name == k {
				return e.Value, true
			}
		}
		return "", false
	}
	j, err := sandbox.NewJob(lookup, sandbox.Request{Command: []string{"kbgen", "run"}, StageDir: t.TempDir(), RunnerBinary: "/usr/local/bin/kbgen", NoGPU: true})
	if err != nil {
		t.Fatalf("the sandbox cannot plan the reproduced job: %v", err)
	}
	argv := strings.Join(j.Spec.Argv(), " ")
	for _, want := range []string{"--cpuset-cpus 40-51", "--memory 200g", "ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1"} {
		if !strings.Contains(argv, want) {
			t.Errorf("reproduced docker run lacks %q: %s", want, argv)
		}
	}
	if q, _ := lookup(contract.EnvAgentQueue); q != "nvidia-h100" {
		t.Errorf("agent queue tag %q", q)
	}

	for _, tc := range []struct{ queue, want string }{
		{"", "the plan has no queue"},
		{"brand-new-queue", "add it to the vendor registry"},
	} {
		p.Queue = tc.queue
		if _, err := JobEnv(p, reg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("queue %q: %v, want %q", tc.queue, err, tc.want)
		}
	}
}
