package jobenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/registry"
)

// ErrNoQueue: the plan names no queue, so it has no step to reproduce.
var ErrNoQueue = errors.New("the plan has no queue")

// Step is what the gpu-docker hook sees besides the placement when an eval
// step of p's queue runs on an agent: the step's plugin config (as the
// agent passes it, BUILDKITE_PLUGINS), the agent's queue tag, the step's
// queue, and the built-in example job in test mode as the payload. With
// the placement (node.Agent.Env) it is everything `kbgen sandbox` reads,
// so a job can be reproduced by hand on the node:
//
//	eval "$(kbgen node env --gpu-index 3)" && kbgen sandbox --dry-run -- kbgen run
//
// The step is the one the generator makes (pipelinegen.EvalFor), so its
// image and limits are the registry's. A plan with no queue, or a queue the
// registry does not know, has no step to reproduce.
func Step(p *node.Plan, reg *registry.Registry) ([]node.EnvVar, error) {
	if p.Queue == "" {
		return nil, fmt.Errorf("%w, so there is no step to reproduce: pass --queue, or install the node first (kbgen node install)", ErrNoQueue)
	}
	v, err := reg.Lookup(p.Queue)
	if err != nil {
		return nil, fmt.Errorf("queue %s: %w; add it to the vendor registry to reproduce its steps", p.Queue, err)
	}
	in, err := pipelinegen.ExampleJobFor(v, payload.ModeTest)
	if err != nil {
		return nil, err
	}
	eval, err := pipelinegen.EvalFor(pipelinegen.Job{Input: in, RunID: "by-hand", Queue: v.Queue}, v, pipelinegen.Options{})
	if err != nil {
		return nil, err
	}
	plugins, err := json.Marshal([]map[string]plugincfg.GPUDocker{{plugincfg.Source: eval.Plugin}})
	if err != nil {
		return nil, err
	}
	return []node.EnvVar{
		{Name: contract.EnvPlugins, Value: string(plugins)},
		{Name: contract.EnvAgentQueue, Value: v.Queue},
		{Name: contract.EnvQueue, Value: v.Queue},
		{Name: contract.EnvRunID, Value: "by-hand"},
		{Name: contract.EnvPayload, Value: in.Encoded},
	}, nil
}

// Request is `kbgen node env`: the agent of GPU GPUIndex in the plan
// installed under Root (or Source planned afresh), and whether to leave
// out the step and job (PlacementOnly).
type Request struct {
	Root          string
	Source        node.Source
	GPUIndex      int
	PlacementOnly bool
}

// ForAgent is what a job on one agent sees: its placement, then (unless
// PlacementOnly) Step. No step to reproduce is not a failure, since the
// placement is still worth having: note says why it is missing. An agent
// the plan lacks carries exitcode.Usage.
func ForAgent(ctx context.Context, req Request) (env []node.EnvVar, note, err error) {
	p, err := node.LoadOrPlan(ctx, req.Root, req.Source)
	if err != nil {
		return nil, nil, err
	}
	a := p.Agent(req.GPUIndex)
	if a == nil {
		return nil, nil, exitcode.Usagef("no agent for GPU %d: this node has %d GPUs", req.GPUIndex, len(p.Agents))
	}
	env = a.Env(p.Runtime, p.CgroupVersion)
	if req.PlacementOnly {
		return env, nil, nil
	}
	reg, err := node.LoadRegistry(req.Source.Vendors)
	if err != nil {
		return nil, nil, err
	}
	job, note := Step(p, reg)
	return append(env, job...), note, nil
}
