package node

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/registry"
)

func TestCheckQueue(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	agents := []Agent{{ID: "gpu0", CPUs: 26}, {ID: "gpu1", CPUs: 26}}
	for _, tt := range []struct {
		name    string
		queue   string
		runtime contract.Runtime
		agents  []Agent
		allow   bool // --allow-unknown-queue
		// refused and mismatch are text as well as the error's type: the
		// message is the contract, it tells the operator the way out
		// (--allow-unknown-queue, where the queue runs instead).
		refused   string   // part of an unknown queue's refusal
		mismatch  string   // part of the *QueueMismatchError, "" for none
		wantQueue string   // the plan's queue after the check
		notes     []string // a part of each note, in order
	}{
		{name: "no queue", runtime: contract.RuntimeNVIDIA},
		{name: "canonical", queue: "nvidia-h100", runtime: contract.RuntimeNVIDIA, agents: agents, wantQueue: "nvidia-h100",
			notes: []string{"a step of queue nvidia-h100 uses 12 of its agent's 26 CPUs"}},
		// The vendor bug of issue 19: agents tagged queue=h100 never got a
		// job, since steps target nvidia-h100.
		{name: "alias resolved", queue: "h100", runtime: contract.RuntimeNVIDIA, agents: agents, wantQueue: "nvidia-h100",
			notes: []string{`queue "h100" is an alias of "nvidia-h100"`, "uses 12 of its agent's 26 CPUs"}},
		{name: "agent smaller than the step", queue: "nvidia-h100", runtime: contract.RuntimeNVIDIA, agents: []Agent{{CPUs: 26}, {CPUs: 8}}, wantQueue: "nvidia-h100",
			notes: []string{"asks for 12 CPUs but an agent here owns 8: the sandbox will refuse its steps"}},
		// A --mig-queue plan: the MIG agents (one core each) serve their
		// own queue, so the whole-GPU queue's step is compared with the
		// whole-GPU agents only; it once warned that every step would be
		// refused.
		{name: "MIG agents not counted", queue: "nvidia-h100", runtime: contract.RuntimeNVIDIA, agents: []Agent{{CPUs: 26}, {CPUs: 1, Queue: "nvidia-h100-mig"}}, wantQueue: "nvidia-h100",
			notes: []string{"a step of queue nvidia-h100 uses 12 of its agent's 26 CPUs"}},
		{name: "other runtime", queue: "amd-mi300", runtime: contract.RuntimeNVIDIA, mismatch: `queue "amd-mi300" runs rocm GPUs (MI300X), but this node's GPUs are nvidia`, wantQueue: "amd-mi300"},
		{name: "nvidia queue on AMD", queue: "nvidia-h100", runtime: contract.RuntimeROCm, mismatch: "this node's GPUs are rocm", wantQueue: "nvidia-h100"},
		{name: "kubernetes", queue: "nebius-h100-k8s", runtime: contract.RuntimeNVIDIA, mismatch: "runs on Kubernetes", wantQueue: "nebius-h100-k8s"},
		{name: "unknown queue allowed", queue: "brand-new-queue", allow: true, runtime: contract.RuntimeROCm, wantQueue: "brand-new-queue", notes: []string{"not in the vendor registry"}},
		// Issue 27: a typo installed a whole node with exit 0 and a note.
		{name: "unknown queue refused", queue: "nvidia-h10", runtime: contract.RuntimeNVIDIA, wantQueue: "nvidia-h10", refused: `unknown queue "nvidia-h10" (known: `},
		{name: "alias with unknown allowed", queue: "h100", allow: true, runtime: contract.RuntimeNVIDIA, agents: agents, wantQueue: "nvidia-h100",
			notes: []string{`queue "h100" is an alias of "nvidia-h100"`, "uses 12 of its agent's 26 CPUs"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &Plan{Queue: tt.queue, Runtime: tt.runtime, Agents: tt.agents}
			err := CheckQueue(p, reg, tt.allow)
			var qm *QueueMismatchError
			var uq *registry.UnknownQueueError
			switch {
			case tt.refused != "":
				if !errors.As(err, &uq) || !strings.Contains(err.Error(), tt.refused) || !strings.Contains(err.Error(), "--allow-unknown-queue") {
					t.Fatalf("%v, want an unknown queue refused with %q and the way out", err, tt.refused)
				}
				return
			case tt.mismatch == "" && err != nil:
				t.Fatalf("%v", err)
			case tt.mismatch != "" && (!errors.As(err, &qm) || !strings.Contains(err.Error(), tt.mismatch)):
				t.Fatalf("%v, want a mismatch with %q", err, tt.mismatch)
			}
			if p.Queue != tt.wantQueue {
				t.Errorf("queue %q, want %q", p.Queue, tt.wantQueue)
			}
			if tt.mismatch != "" {
				return
			}
			if len(p.Notes) != len(tt.notes) {
				t.Fatalf("notes %q, want %d", p.Notes, len(tt.notes))
			}
			for i, n := range tt.notes {
				if !strings.Contains(p.Notes[i], n) {
					t.Errorf("note %d %q lacks %q", i, p.Notes[i], n)
				}
			}
		})
	}
}

// TestQueueImage: the probe image follows the registry in use, so a
// vendor file (--vendors, KBGEN_VENDORS) is honoured, not the built-in one.
func TestQueueImage(t *testing.T) {
	t.Parallel()
	builtin, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	h100, err := builtin.Lookup("nvidia-h100")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		plan *Plan
		want string
	}{
		{"installed queue", &Plan{Queue: "nvidia-h100"}, h100.Image},
		{"alias", &Plan{Queue: "h100"}, h100.Image},
		{"no queue", &Plan{}, ""},
		{"unknown queue", &Plan{Queue: "brand-new-queue"}, ""},
		{"no plan", nil, ""},
	} {
		if got := QueueImage(tt.plan, builtin); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestResolveShapes(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	got, err := ResolveShapes(reg, []string{"h100x8", "nvidia-l4x4", "mi300x8"})
	if err != nil {
		t.Fatal(err)
	}
	want := []Shape{{"nvidia-h100x8", 8}, {"nvidia-l4x4", 4}, {"amd-mi300x8", 8}}
	if !slices.Equal(got, want) {
		t.Errorf("ResolveShapes = %v, want %v", got, want)
	}
	for _, bad := range []string{"nvidia-h100", "nebius-h100-k8s", "h200"} {
		if _, err := ResolveShapes(reg, []string{bad}); err == nil {
			t.Errorf("--shape %s accepted", bad)
		}
	}
}

func TestCheckAgentQueues(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name, queue, uuid string
		ok                bool
	}{
		{"MIG on the test-only queue", "nvidia-h100-mig", "MIG-1", true},
		{"MIG on a ranked queue", "nvidia-h100", "MIG-1", false},
		{"a shape on an AMD queue", "amd-mi300x8", "GPU-1", false},
		{"a shape on its queue", "nvidia-h100x8", "GPU-1", true},
	} {
		p := &Plan{Runtime: "nvidia", Agents: []Agent{{ID: "a", Queue: tt.queue, GPU: GPU{UUID: tt.uuid}}}}
		if err := CheckAgentQueues(p, reg); (err == nil) != tt.ok {
			t.Errorf("%s: %v", tt.name, err)
		}
	}
}
