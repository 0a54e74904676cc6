package hostfacts

import (
	"maps"
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/version"
	"github.com/gpu-mode/kbgen/noise"
)

const uuid = "GPU-9b0d3e39-2c11-4f6a-8e5d-1f2a3b4c5d6e"

func TestGather(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		contract.EnvAgentName: "node3-gpu0", contract.EnvQueue: "nvidia-h100", contract.EnvGPUUUID: uuid + ",GPU-other",
		"BUILDKITE_PLUGIN_GPU_DOCKER_IMAGE": "ghcr.io/gpu-mode/runner@sha256:" + sha, contract.EnvBuildkiteRetryCount: "1", contract.EnvSandboxExit: "75",
	}
	fault := 75
	rec := &noise.Record{Verdict: noise.Noisy,
		Reasons: []noise.Reason{{Source: "steal", External: true, Message: "steal 9 %"}, {Source: "cgroup_throttling", Message: "own load"}},
		Runs: map[string]*noise.Run{"benchmark": {NVIDIA: noise.NVIDIAReport{Xids: []int{79, 13},
			EventCounters: map[string]float64{"hw_power_brake_slowdown": 1.5e6, "applications_clocks_setting": 9e6}}}}}
	power, err := os.ReadFile("testdata/nvidia-smi-power-limit.csv") // nvidia-smi --query-gpu=uuid,power.limit --format=csv,noheader,nounits
	if err != nil {
		t.Fatal(err)
	}
	one := maps.Clone(env)
	one[contract.EnvGPUUUID] = uuid
	mig := maps.Clone(env)
	mig[contract.EnvGPUUUID] = "MIG-1b2c"
	for _, tc := range []struct {
		name string
		host Host
		rec  *noise.Record
		want runfacts.Facts
	}{
		{"NVIDIA host with a noisy record", Host{Lookup: contract.MapLookup(env), Proc: os.DirFS("testdata/proc"), Name: "node3", PowerLimits: power}, rec, runfacts.Facts{
			Agent: "node3-gpu0", Queue: "nvidia-h100", Node: "node3", GPUUUIDs: []string{uuid, "GPU-other"}, GPUModel: "NVIDIA H100 80GB HBM3",
			Driver: "550.54.15", ImageDigest: "sha256:" + sha, KbgenVersion: version.String(), Noise: "noisy", NoiseReasons: []string{"steal: steal 9 %"},
			Xids: 1, ClockEventSeconds: 1.5, Attempt: 2, Exit: &fault, PowerLimit: "700/650 W"}},
		{"one GPU's power limit, its image not pulled", Host{Lookup: contract.MapLookup(one), Name: "node3", PowerLimits: power, ImagePulled: ptr(false)}, nil, runfacts.Facts{
			Agent: "node3-gpu0", Queue: "nvidia-h100", Node: "node3", GPUUUIDs: []string{uuid}, ImageDigest: "sha256:" + sha, KbgenVersion: version.String(),
			Attempt: 2, Exit: &fault, PowerLimit: "700 W", ImagePulled: ptr(false)}},
		{"a MIG instance: its limit is not listed", Host{Lookup: contract.MapLookup(mig), Name: "node3", PowerLimits: power}, nil, runfacts.Facts{
			Agent: "node3-gpu0", Queue: "nvidia-h100", Node: "node3", GPUUUIDs: []string{"MIG-1b2c"}, ImageDigest: "sha256:" + sha, KbgenVersion: version.String(),
			Attempt: 2, Exit: &fault}},
		{"no module, no record, agent queue tag", Host{Lookup: contract.MapLookup(map[string]string{contract.EnvAgentQueue: "amd-mi300",
			contract.EnvGPURenderNode: "/dev/dri/renderD128", "BUILDKITE_PLUGIN_GPU_DOCKER_IMAGE": "rocm/runner:1"}), Proc: os.DirFS(t.TempDir()), Name: "n"}, nil,
			runfacts.Facts{Queue: "amd-mi300", Node: "n", GPUUUIDs: []string{"/dev/dri/renderD128"}, ImageDigest: "rocm/runner:1", KbgenVersion: version.String(), Attempt: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if d := cmp.Diff(tc.want, Gather(tc.host, tc.rec)); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

const sha = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
