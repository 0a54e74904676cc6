package sandbox

import (
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/golden"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/steps"
)

// goldenPlacements are agents as `kbgen node install` would place them on
// the reference machines (see node/testdata), by runtime.
var goldenPlacements = []struct {
	name    string
	runtime contract.Runtime
	env     map[string]string
}{
	{"8xh100-gpu3", contract.RuntimeNVIDIA, dockerargvtest.NVIDIAPlacementEnv()},
	{"2xl40s-gpu1", contract.RuntimeNVIDIA, map[string]string{
		contract.EnvGPUIndex: "1", contract.EnvGPUUUID: "GPU-0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9",
		contract.EnvCPUSet: "9-15", contract.EnvMems: "0", contract.EnvMemory: "120g",
	}},
	{"8xmi300x-gpu5", contract.RuntimeROCm, dockerargvtest.ROCmPlacementEnv()},
	// Multi-GPU agents: the whole node's GPUs, CPUs on both NUMA nodes.
	{"8xh100-x8", contract.RuntimeNVIDIA, dockerargvtest.MultiGPUPlacementEnv(contract.RuntimeNVIDIA, 8)},
	{"4xl4-x4", contract.RuntimeNVIDIA, dockerargvtest.MultiGPUPlacementEnv(contract.RuntimeNVIDIA, 4)},
	{"8xmi300x-x8", contract.RuntimeROCm, dockerargvtest.MultiGPUPlacementEnv(contract.RuntimeROCm, 8)},
}

// TestGoldenArgv plans the eval step the generator emits for every vendor
// in the registry on every placement of its runtime, and compares the
// argv (or the refusal) with golden/sandbox/<queue>@<placement>.txt.
// UPDATE_GOLDEN=1 rewrites them.
func TestGoldenArgv(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	devices := dockerargvtest.MultiGPUDevices()
	maps.Copy(devices, dockerargvtest.AMDDevices)
	host := dockerargvtest.FakeHost(t, devices)
	dir := filepath.Join("..", "golden", "sandbox")
	seen := map[string]bool{}
	for _, v := range reg.Vendors {
		if v.Backend == registry.BackendKubernetes {
			name := v.Queue + "@pod.txt"
			seen[name] = true
			t.Run(name, func(t *testing.T) { checkGolden(t, filepath.Join(dir, name), podPlanText(t, v, host)) })
			continue
		}
		for _, pl := range goldenPlacements {
			if pl.runtime != v.Runtime {
				continue
			}
			name := v.Queue + "@" + pl.name + ".txt"
			seen[name] = true
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				step := exampleEvalStep(t, v)
				env := agentEnv(t, step, pl.env)
				got := "# " + v.Queue + " on " + pl.name + ": kbgen sandbox --dry-run -- " + step.Command + "\n" + planText(env, host)
				checkGolden(t, filepath.Join(dir, name), got)
			})
		}
	}
	// A golden file for a vendor or placement that no longer exists is stale.
	files, _ := filepath.Glob(filepath.Join(dir, "*.txt"))
	for _, f := range files {
		if !seen[filepath.Base(f)] {
			t.Errorf("%s matches no vendor × placement; delete it", f)
		}
	}
}

// agentEnv is the environment the plugin's command hook sees: the step's
// plugins as the agent serialises them, its env, and the placement.
func agentEnv(t *testing.T, step *pipeline.CommandStep, placement map[string]string) map[string]string {
	t.Helper()
	var plugins []map[string]any
	for _, p := range step.Plugins {
		plugins = append(plugins, map[string]any{p.Source: p.Config})
	}
	js, err := json.Marshal(plugins)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		contract.EnvPlugins:            string(js),
		"BUILDKITE_JOB_ID":             "0190a1b2-c3d4-4e5f-8a9b-0c1d2e3f4a5b",
		"BUILDKITE_COMMAND":            step.Command,
		"BUILDKITE_AGENT_ACCESS_TOKEN": "agent-token-must-not-leak",
	}
	for k, v := range step.Env {
		env[k] = v
	}
	for k, v := range placement {
		env[k] = v
	}
	return env
}

// planText is what `kbgen sandbox --dry-run` would print, or its refusal.
// A refusal's text goes into the golden: it is what the operator reads.
func planText(env map[string]string, host dockerargv.Host) string {
	look := lookup(env)
	cfg, err := ConfigFromEnv(look)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	pl, err := dockerargv.PlacementFromEnv(look)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	name := dockerargv.ContainerName(env["BUILDKITE_JOB_ID"])
	stage := NewStage("/var/lib/buildkite-agent/tmp", name, true)
	s, err := dockerargv.DockerRun(cfg, pl, host, dockerargv.Options{
		Name:         name,
		Command:      strings.Fields(env["BUILDKITE_COMMAND"]),
		RunnerBinary: "/usr/local/bin/kbgen",
		PayloadFile:  stage.PayloadFile,
		Env:          dockerargv.ContainerEnv(look),
	})
	if err != nil {
		code := 2
		if refusal.IsRefused(err) {
			code = 75
		}
		return fmt.Sprintf("exit %d: %v\n", code, err)
	}
	return s.String()
}

func checkGolden(t *testing.T, path, got string) {
	t.Helper()
	golden.Check(t, path, []byte(got))
	if strings.Contains(got, "must-not-leak") {
		t.Errorf("%s: the agent token reached the argv", path)
	}
}

// podPlanText is what the Kubernetes step's sandbox runs in its pod
// (steps.KubernetesCommand), as `--dry-run` prints it: the environment
// the agent's bootstrap has there (the image's, the agent's own directory
// first on PATH, the build path under /workspace, the token).
func podPlanText(t *testing.T, v *registry.Vendor, host dockerargv.Host) string {
	t.Helper()
	env := agentEnv(t, exampleEvalStep(t, v), map[string]string{
		"PATH":                         steps.KubernetesWorkspace + ":/opt/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"VIRTUAL_ENV":                  "/opt/venv",
		"PYTHONUNBUFFERED":             "1",
		contract.EnvBuildPath:          steps.KubernetesWorkspace + "/build",
		"BUILDKITE_AGENT_ACCESS_TOKEN": "agent-token-must-not-leak",
	})
	if v.Runtime != contract.RuntimeROCm {
		// An NVIDIA pod has no /dev/kfd or render nodes.
		host.KFD, host.Glob = "", func(string) ([]string, error) { return nil, nil }
	}
	req := Request{Launcher: LauncherProcess, Command: strings.Fields(steps.RunCommand), RunnerBinary: dockerargv.ContainerRunner, Protect: []string{steps.KubernetesWorkspace}, Host: &host}
	step, err := processStep(lookup(env), req, jobInput{encoded: "-", hasPayload: true, jobID: env["BUILDKITE_JOB_ID"]})
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	j, err := newProcessJob(step, req)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	return "# " + v.Queue + " in its pod: kbgen sandbox --launcher process --protect " + steps.KubernetesWorkspace + " --dry-run -- " + steps.RunCommand + "\n" + j.Spec.String()
}
