package dockerargv_test

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// TestGrantGPUs: a step gets exactly its agent's GPUs, all of them, by
// UUID or render node; the container is told how many.
func TestGrantGPUs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		rt        contract.Runtime
		env       map[string]string
		gpus      int
		wantFlags [][]string // GPU flags in order
		wantIDs   []string
	}{
		{"one NVIDIA GPU", "nvidia", dockerargvtest.NVIDIAPlacementEnv(), 1,
			[][]string{{"--gpus", "device=GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}},
			[]string{"GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}},
		{"a MIG instance", "nvidia", withEnv(dockerargvtest.NVIDIAPlacementEnv(), contract.EnvGPUUUID, "MIG-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"), 1,
			[][]string{{"--gpus", "device=MIG-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}},
			[]string{"MIG-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}},
		{"four NVIDIA GPUs: one quoted CSV field", "nvidia", dockerargvtest.MultiGPUPlacementEnv("nvidia", 4), 4,
			[][]string{{"--gpus", `"device=GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a00,GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a01,GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a02,GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a03"`}},
			[]string{"GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a00", "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a01", "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a02", "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a03"}},
		{"eight AMD GPUs: kfd, every render node, their groups", "rocm", dockerargvtest.MultiGPUPlacementEnv("rocm", 8), 8,
			[][]string{{"--device", "/dev/kfd"}, {"--device", "/dev/dri/renderD128"}, {"--device", "/dev/dri/renderD129"}, {"--device", "/dev/dri/renderD130"}, {"--device", "/dev/dri/renderD131"},
				{"--device", "/dev/dri/renderD132"}, {"--device", "/dev/dri/renderD133"}, {"--device", "/dev/dri/renderD134"}, {"--device", "/dev/dri/renderD135"},
				{"--group-add", "44"}, {"--group-add", "45"}, {"--group-add", "110"}},
			[]string{"renderD128", "renderD129", "renderD130", "renderD131", "renderD132", "renderD133", "renderD134", "renderD135"}},
	}
	host := dockerargvtest.FakeHost(t, dockerargvtest.MultiGPUDevices())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(tt.rt)
			cfg.GPUs, cfg.CPUs = tt.gpus, 0
			s, err := dockerargv.DockerRun(cfg, mustPlacement(t, tt.env), host, testOptions())
			if err != nil {
				t.Fatal(err)
			}
			var flags [][]string
			for _, l := range s.Lines {
				if len(l) == 2 && (l[0] == "--gpus" || l[0] == "--device" || l[0] == "--group-add") {
					flags = append(flags, l)
				}
			}
			if !slices.EqualFunc(flags, tt.wantFlags, slices.Equal) {
				t.Errorf("GPU flags\n got %q\nwant %q", flags, tt.wantFlags)
			}
			if !slices.Equal(s.GPUs, tt.wantIDs) {
				t.Errorf("Spec.GPUs = %q, want %q", s.GPUs, tt.wantIDs)
			}
			count := contract.EnvGPUCount + "=" + strconv.Itoa(len(tt.wantIDs))
			if !slices.Contains(dockerargvtest.FlagValues(s, "--env"), count) {
				t.Errorf("container env %q lacks %s", dockerargvtest.FlagValues(s, "--env"), count)
			}
		})
	}
}

// TestGrantGPUsRefuses: never more GPUs than the agent owns, never a
// one-GPU step on a multi-GPU agent, never a list that names a GPU twice
// or smuggles in something else; each a refusal (75).
func TestGrantGPUsRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		rt   contract.Runtime
		env  map[string]string
		gpus int
		want string
	}{
		{"eight asked of four", "nvidia", dockerargvtest.MultiGPUPlacementEnv("nvidia", 4), 8, "8 asked, this agent owns 4"},
		{"one asked of four", "nvidia", dockerargvtest.MultiGPUPlacementEnv("nvidia", 4), 1, "a step gets all of them"},
		{"none said of eight", "rocm", dockerargvtest.MultiGPUPlacementEnv("rocm", 8), 0, "a step gets all of them"},
		{"a UUID twice", "nvidia", withEnv(dockerargvtest.NVIDIAPlacementEnv(), contract.EnvGPUUUID, "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b,GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"), 2, "twice"},
		{"all smuggled into a list", "nvidia", withEnv(dockerargvtest.NVIDIAPlacementEnv(), contract.EnvGPUUUID, "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b,all"), 2, `"all" is not an NVIDIA GPU UUID`},
		{"an empty list entry", "nvidia", withEnv(dockerargvtest.NVIDIAPlacementEnv(), contract.EnvGPUUUID, "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b,"), 2, `"" is not an NVIDIA GPU UUID`},
		{"a card node in the list", "rocm", withEnv(dockerargvtest.ROCmPlacementEnv(), contract.EnvGPURenderNode, "/dev/dri/renderD128,/dev/dri/card1"), 2, "not a render node"},
		{"a render node not there", "rocm", withEnv(dockerargvtest.ROCmPlacementEnv(), contract.EnvGPURenderNode, "/dev/dri/renderD128,/dev/dri/renderD140"), 2, "renderD140 is not there"},
	}
	host := dockerargvtest.FakeHost(t, dockerargvtest.MultiGPUDevices())
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(tt.rt)
			cfg.GPUs, cfg.CPUs = tt.gpus, 0
			_, err := dockerargv.DockerRun(cfg, mustPlacement(t, tt.env), host, testOptions())
			// The message is the contract: the job log tells the operator why the agent said no.
			if !refusal.IsRefused(err) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want a refusal saying %q", err, tt.want)
			}
		})
	}
}

func withEnv(env map[string]string, k, v string) map[string]string {
	env[k] = v
	return env
}
