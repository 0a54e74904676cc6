package node

import (
	"errors"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/pipelinegen"
)

func TestCheckQueue(t *testing.T) {
	reg, err := pipelinegen.LoadRegistry("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		queue    string
		runtime  contract.Runtime
		mismatch string // part of the *QueueMismatchError, "" for none
		note     bool
	}{
		{"", contract.RuntimeNVIDIA, "", false},
		{"nvidia-h100", contract.RuntimeNVIDIA, "", false},
		{"h100", contract.RuntimeNVIDIA, "", false},
		{"amd-mi300", contract.RuntimeNVIDIA, `queue "amd-mi300" runs rocm GPUs (MI300X), but this node's GPUs are nvidia`, false},
		{"nvidia-h100", contract.RuntimeROCm, "this node's GPUs are rocm", false},
		{"nebius-h100-k8s", contract.RuntimeNVIDIA, "runs on Kubernetes", false},
		{"brand-new-queue", contract.RuntimeROCm, "", true},
	} {
		p := &Plan{Queue: tt.queue, Runtime: tt.runtime}
		err := CheckQueue(p, reg)
		var qm *QueueMismatchError
		switch {
		case tt.mismatch == "" && err != nil:
			t.Errorf("%s on %s: %v", tt.queue, tt.runtime, err)
		case tt.mismatch != "" && (!errors.As(err, &qm) || !strings.Contains(err.Error(), tt.mismatch)):
			t.Errorf("%s on %s: %v, want a mismatch with %q", tt.queue, tt.runtime, err, tt.mismatch)
		}
		if got := len(p.Notes) == 1 && strings.Contains(p.Notes[0], "not in the vendor registry"); got != tt.note {
			t.Errorf("%s: notes %q", tt.queue, p.Notes)
		}
	}
}

// TestQueueImage: the probe image follows the registry in use, so a
// vendor file (--vendors, KBGEN_VENDORS) is honoured, not the built-in one.
func TestQueueImage(t *testing.T) {
	builtin, err := pipelinegen.LoadRegistry("")
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
