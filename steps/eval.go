package steps

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/plugincfg"
)

// RunCommand is what the eval step runs inside the container.
const RunCommand = "kbgen run"

// ProfileArtifacts is the eval step's artifact path for profile traces,
// beside contract.ResultFile.
const ProfileArtifacts = contract.ProfileDir + "/**/*"

// Eval describes one eval step. Every string that came from a payload or
// the build env must already be escaped with Escape.
type Eval struct {
	Label          string
	Queue          string
	Plugin         plugincfg.GPUDocker
	Env            map[string]string
	TimeoutMinutes int
	Priority       int
	// Agent, when set, targets the one agent whose contract.AgentTag is
	// this name, beside the queue.
	Agent            string
	ConcurrencyGroup string // empty: no per-user limit
	Concurrency      int
	// Kubernetes emits the agent-stack-k8s `kubernetes` plugin (a pod spec)
	// instead of the gpu-docker plugin.
	Kubernetes bool
}

// Timeout is the step's timeout_in_minutes as a duration: the most the
// whole step, image start included, may take.
func (e Eval) Timeout() time.Duration { return time.Duration(e.TimeoutMinutes) * time.Minute }

// CommandStep builds the go-pipeline step. Fields go-pipeline does not
// model (agents, retry, timeout, …) go into RemainingFields, which yaml.v3
// writes in sorted order, so the output is stable.
func (e Eval) CommandStep() (*pipeline.CommandStep, error) {
	plugin, err := e.plugin()
	if err != nil {
		return nil, err
	}
	agents := map[string]any{"queue": e.Queue}
	if e.Agent != "" {
		agents[contract.AgentTag] = e.Agent
	}
	rest := map[string]any{
		"agents":             agents,
		"artifact_paths":     []any{contract.ResultFile, ProfileArtifacts},
		"timeout_in_minutes": e.TimeoutMinutes,
		"priority":           e.Priority,
		"retry":              InfraRetry(),
	}
	if e.ConcurrencyGroup != "" {
		rest["concurrency_group"] = e.ConcurrencyGroup
		rest["concurrency"] = max(e.Concurrency, 1)
	}
	return &pipeline.CommandStep{
		Key:             contract.EvalStepKey,
		Label:           e.Label,
		Command:         RunCommand,
		Plugins:         pipeline.Plugins{plugin},
		Env:             e.Env,
		RemainingFields: rest,
	}, nil
}

func (e Eval) plugin() (*pipeline.Plugin, error) {
	if e.Kubernetes {
		spec, err := KubernetesPodSpec(e.Plugin)
		if err != nil {
			return nil, fmt.Errorf("building pod spec: %w", err)
		}
		return &pipeline.Plugin{Source: KubernetesPluginSource, Config: spec}, nil
	}
	cfg, err := pluginConfigMap(e.Plugin)
	if err != nil {
		return nil, err
	}
	return &pipeline.Plugin{Source: plugincfg.Source, Config: cfg}, nil
}

// pluginConfigMap turns the typed config into the generic map go-pipeline
// and the agent work with, so a signature computed here matches what the
// agent computes from the parsed YAML.
func pluginConfigMap(c plugincfg.GPUDocker) (map[string]any, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("encoding gpu-docker config: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decoding gpu-docker config: %w", err)
	}
	for k, v := range m {
		if f, ok := v.(float64); ok && f == float64(int(f)) {
			m[k] = int(f)
		}
	}
	return m, nil
}
