package jobenv

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/sandbox"
)

// TestStepReproducesAnEvalStep: the placement plus Step is all the sandbox
// needs to plan the job (the reproduce-by-hand recipe failed on every
// machine: no plugin config, no payload); no plan queue, or a queue the
// registry lacks, is said plainly.
func TestStepReproducesAnEvalStep(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	fixture := "../node/testdata/h100x8/"
	p, err := node.PlanSource(context.Background(), node.Source{Sysfs: fixture + "sys", NvidiaSMI: fixture + "nvidia-smi.csv", Queue: "nvidia-h100",
		ReserveCores: 1, ReserveMemory: "16g"})
	if err != nil {
		t.Fatal(err)
	}
	job, err := Step(p, reg)
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

	p.Queue = ""
	if _, err := Step(p, reg); !errors.Is(err, ErrNoQueue) {
		t.Errorf("no queue: %v, want ErrNoQueue", err)
	}
	p.Queue = "brand-new-queue"
	if _, err := Step(p, reg); !errors.As(err, new(*registry.UnknownQueueError)) {
		t.Errorf("an unknown queue: %v, want an UnknownQueueError", err)
	}
}

// l40s is node's two-L40S fixture machine, with no queue.
func l40s() node.Source {
	f := "../node/testdata/l40sx2/"
	return node.Source{Sysfs: f + "sys", NvidiaSMI: f + "nvidia-smi.csv", ReserveCores: 1, ReserveMemory: "16g"}
}

// TestForAgent: the placement and the step, the placement alone on
// request or (with a note) when the plan has no queue, and a usage error
// for a GPU the node lacks.
func TestForAgent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		req       Request
		wantCode  int
		wantVar   string // a variable the env must hold
		wantNote  bool
		placement bool // only the placement: no payload
	}{
		{"placement and job", Request{Source: l40s(), GPUIndex: 1}, exitcode.OK, contract.EnvPayload, false, false},
		{"placement only", Request{Source: l40s(), GPUIndex: 1, PlacementOnly: true}, exitcode.OK, contract.EnvCPUSet, false, true},
		{"no queue: the placement and a note", Request{Source: l40s(), GPUIndex: 0}, exitcode.OK, contract.EnvCPUSet, true, true},
		{"no such GPU", Request{Source: l40s(), GPUIndex: 7}, exitcode.Usage, "", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.req.Root = t.TempDir()
			if tc.name != "no queue: the placement and a note" {
				tc.req.Source.Queue = "nvidia-l40s"
			}
			env, note, err := ForAgent(context.Background(), tc.req)
			if got := exitcode.Of(err); got != tc.wantCode || (note != nil) != tc.wantNote {
				t.Fatalf("exit %d (%v), note %v; want exit %d, a note: %v", got, err, note, tc.wantCode, tc.wantNote)
			}
			has := func(name string) bool {
				return slices.ContainsFunc(env, func(e node.EnvVar) bool { return e.Name == name })
			}
			if tc.wantVar != "" && !has(tc.wantVar) {
				t.Errorf("env lacks %s: %v", tc.wantVar, env)
			}
			if got := has(contract.EnvPayload); got == tc.placement {
				t.Errorf("payload in env: %v, want %v", got, !tc.placement)
			}
		})
	}
}
