package node

import (
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// TestEnvLookup: the lookup answers exactly what the environment hook
// exports, so a placement read through it is the one the sandbox reads.
func TestEnvLookup(t *testing.T) {
	t.Parallel()
	a := &Agent{GPU: GPU{Index: 3, UUID: "GPU-3"}, CPUSet: "6-7", Mems: "0", Memory: "8g"}
	lookup := a.EnvLookup(contract.RuntimeNVIDIA, 2)
	for _, tc := range []struct {
		name, want string
		ok         bool
	}{
		{contract.EnvCPUSet, "6-7", true},
		{contract.EnvGPUUUID, "GPU-3", true},
		{contract.EnvGPUIndex, "3", true},
		{contract.EnvCgroupParent, JobsSlice, true},
		{"CUDA_VISIBLE_DEVICES", "GPU-3", true},
		{contract.EnvGPURenderNode, "", false},
	} {
		got, ok := lookup(tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("%s = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	if _, ok := a.EnvLookup(contract.RuntimeNVIDIA, 1)(contract.EnvCgroupParent); ok {
		t.Error("cgroup v1 exports no cgroup parent")
	}
}
