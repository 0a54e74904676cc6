package sandbox

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

func nvidiaPlacementEnv() map[string]string {
	return map[string]string{
		contract.EnvGPUIndex: "3",
		contract.EnvGPUUUID:  "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
		contract.EnvCPUSet:   "36-47,148-159",
		contract.EnvMems:     "0",
		contract.EnvMemory:   "220g",
		contract.EnvPidsMax:  "8192",
		contract.EnvShmMax:   "64g",
	}
}

func TestPlacementFromEnv(t *testing.T) {
	t.Parallel()
	p, err := PlacementFromEnv(lookup(nvidiaPlacementEnv()))
	if err != nil {
		t.Fatal(err)
	}
	if p.CPUs.String() != "36-47,148-159" || p.Mems.String() != "0" || p.Memory != 220<<30 ||
		p.PidsMax != 8192 || p.ShmMax != 64<<30 || p.GPUIndex != "3" || len(p.GPUUUIDs) != 1 || !strings.HasPrefix(p.GPUUUIDs[0], "GPU-") {
		t.Errorf("PlacementFromEnv = %+v", p)
	}
}

func TestPlacementFromEnvRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		change map[string]string
		drop   string
		want   string
	}{
		{"no cpuset", nil, contract.EnvCPUSet, "KERNELBOT_CPUSET is not set"},
		{"no mems", nil, contract.EnvMems, "KERNELBOT_MEMS is not set"},
		{"no memory", nil, contract.EnvMemory, "KERNELBOT_MEMORY is not set"},
		{"empty cpuset", map[string]string{contract.EnvCPUSet: " "}, "", "KERNELBOT_CPUSET is not set"},
		{"bad cpuset", map[string]string{contract.EnvCPUSet: "2-x"}, "", "KERNELBOT_CPUSET"},
		{"bad mems", map[string]string{contract.EnvMems: "zero"}, "", "KERNELBOT_MEMS"},
		{"bad memory", map[string]string{contract.EnvMemory: "lots"}, "", "KERNELBOT_MEMORY"},
		{"bad pids", map[string]string{contract.EnvPidsMax: "-5"}, "", "KERNELBOT_PIDS_MAX"},
		{"bad shm", map[string]string{contract.EnvShmMax: "big"}, "", "KERNELBOT_SHM_MAX"},
		{"bad index", map[string]string{contract.EnvGPUIndex: "one"}, "", "KERNELBOT_GPU_INDEX"},
		{"cgroup parent with a space", map[string]string{contract.EnvCgroupParent: "a b"}, "", "KERNELBOT_CGROUP_PARENT"},
		{"cgroup parent climbing out", map[string]string{contract.EnvCgroupParent: "/x/../../y"}, "", "KERNELBOT_CGROUP_PARENT"},
		{"cgroup parent that is a flag", map[string]string{contract.EnvCgroupParent: "--privileged"}, "", "KERNELBOT_CGROUP_PARENT"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := nvidiaPlacementEnv()
			delete(env, tt.drop)
			for k, v := range tt.change {
				env[k] = v
			}
			_, err := PlacementFromEnv(lookup(env))
			if !refusal.IsRefused(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want a refusal mentioning %q", err, tt.want)
			}
		})
	}
}

// TestCgroupParent: a node that confines its slices to housekeeping CPUs
// exports the jobs slice, and the container is created under it.
func TestCgroupParent(t *testing.T) {
	t.Parallel()
	env := nvidiaPlacementEnv()
	env[contract.EnvCgroupParent] = "kbgen-jobs.slice"
	p, err := PlacementFromEnv(lookup(env))
	if err != nil || p.CgroupParent != "kbgen-jobs.slice" {
		t.Fatalf("PlacementFromEnv = %+v, %v", p, err)
	}
	s, err := DockerRun(testConfig("nvidia"), p, fakeHost(t, nil), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := flagValues(s, "--cgroup-parent"); !slices.Equal(got, []string{"kbgen-jobs.slice"}) {
		t.Errorf("--cgroup-parent = %q", got)
	}
	delete(env, contract.EnvCgroupParent)
	if s, _ := DockerRun(testConfig("nvidia"), mustPlacement(t, env), fakeHost(t, nil), testOptions()); flagValues(s, "--cgroup-parent") != nil {
		t.Errorf("--cgroup-parent without a placement: %q", flagValues(s, "--cgroup-parent"))
	}
}
