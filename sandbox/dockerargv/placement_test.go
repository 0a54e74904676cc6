package dockerargv_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

func TestPlacementFromEnv(t *testing.T) {
	t.Parallel()
	p, err := dockerargv.PlacementFromEnv(contract.MapLookup(dockerargvtest.NVIDIAPlacementEnv()))
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
			env := dockerargvtest.NVIDIAPlacementEnv()
			delete(env, tt.drop)
			for k, v := range tt.change {
				env[k] = v
			}
			_, err := dockerargv.PlacementFromEnv(contract.MapLookup(env))
			// The message is the contract: it names the placement variable the node operator must fix.
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
	env := dockerargvtest.NVIDIAPlacementEnv()
	env[contract.EnvCgroupParent] = "kbgen-jobs.slice"
	p, err := dockerargv.PlacementFromEnv(contract.MapLookup(env))
	if err != nil || p.CgroupParent != "kbgen-jobs.slice" {
		t.Fatalf("PlacementFromEnv = %+v, %v", p, err)
	}
	s, err := dockerargv.DockerRun(testConfig("nvidia"), p, dockerargvtest.FakeHost(t, nil), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := dockerargvtest.FlagValues(s, "--cgroup-parent"); !slices.Equal(got, []string{"kbgen-jobs.slice"}) {
		t.Errorf("--cgroup-parent = %q", got)
	}
	delete(env, contract.EnvCgroupParent)
	if s, _ := dockerargv.DockerRun(testConfig("nvidia"), mustPlacement(t, env), dockerargvtest.FakeHost(t, nil), testOptions()); dockerargvtest.FlagValues(s, "--cgroup-parent") != nil {
		t.Errorf("--cgroup-parent without a placement: %q", dockerargvtest.FlagValues(s, "--cgroup-parent"))
	}
}
