package sandbox

import (
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// TestOnPlacement: doctor's probe and qualify's calibration get a
// one-GPU step's placement (the agent's cpuset, memory and GPU) and
// no job's env; what the sandbox refuses for a step it refuses for them.
func TestOnPlacement(t *testing.T) {
	t.Parallel()
	host := dockerargvtest.FakeHost(t, nil)
	tests := []struct {
		name    string
		env     func(map[string]string)
		noGPU   bool
		want    map[string]string // flag → its one value; "" → absent
		wantErr string
	}{
		{"the agent's placement", nil, false, map[string]string{
			"--cpuset-cpus": "36-47,148-159", "--cpuset-mems": "0", "--memory": "220g", "--gpus": "device=GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
		}, ""},
		{"no GPU", nil, true, map[string]string{"--cpuset-cpus": "36-47,148-159", "--gpus": ""}, ""},
		{"no placement", func(e map[string]string) { delete(e, contract.EnvCPUSet) }, false, nil, "KERNELBOT_CPUSET is not set"},
		{"a bad GPU", func(e map[string]string) { e[contract.EnvGPUUUID] = "all" }, false, nil, "not an NVIDIA GPU UUID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := dockerargvtest.NVIDIAPlacementEnv()
			if tt.env != nil {
				tt.env(env)
			}
			s, err := OnPlacement{
				Placement: contract.MapLookup(env), Image: "img:1", Runtime: contract.RuntimeNVIDIA, Host: host,
				Name: "kbgen-doctor-gpu3", Command: []string{"sh", "-c", "true"}, RunnerBinary: "/usr/local/bin/kbgen", NoGPU: tt.noGPU,
			}.DockerRun()
			if tt.wantErr != "" {
				// The message is the contract: it names the placement variable the operator must fix.
				if err == nil || !refusal.IsRefused(err) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want a refusal mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for flag, want := range tt.want {
				if got := dockerargvtest.FlagValues(s, flag); want == "" && got != nil || want != "" && !slices.Equal(got, []string{want}) {
					t.Errorf("%s = %q, want %q", flag, got, want)
				}
			}
			for _, e := range dockerargvtest.FlagValues(s, "--env") {
				if strings.HasPrefix(e, "KERNELBOT_") || strings.HasPrefix(e, "BUILDKITE_") {
					t.Errorf("a job's env reached the container: --env %s", e)
				}
			}
		})
	}
}
