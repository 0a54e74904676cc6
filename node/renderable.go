package node

import (
	"fmt"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/gpuid"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/shellquote"
)

// Every value Render writes into a shell file (the environment hook),
// a systemd EnvironmentFile (agent.env, which docs also paste into a
// shell), a unit or the sudoers drop-in comes from the machine: drivers,
// sysfs, a kbgen-nvml inventory, a plan file. The readers check them
// (gpuid); Render checks them again whatever their source, so a plan
// that did not come through a reader cannot write a line of its own.

var (
	// agentID is what the planner names agents: gpu3, gpu3-mig0, gpux8-0.
	agentID    = lazyre.New(`^gpu[0-9a-z-]{1,40}$`)
	renderNode = lazyre.New(`^/dev/dri/renderD[0-9]{1,4}$`)
	pciAddress = lazyre.New(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$`)
)

// UnsafePlanError is a plan value Render will not write: an agent id, a
// GPU's PCI address, UUID or render node, or a placement value outside
// its grammar (an edited plan.json, or a reader's bug). Agent is the
// agent's id as the plan has it; the message quotes the value escaped.
type UnsafePlanError struct {
	Agent string
	Err   error
}

func (e *UnsafePlanError) Error() string { return e.Err.Error() }
func (e *UnsafePlanError) Unwrap() error { return e.Err }

// checkRenderable checks each agent's id and GPUs against the grammars.
func checkRenderable(p *Plan) error {
	for _, a := range p.Agents {
		if !agentID.MatchString(a.ID) {
			return &UnsafePlanError{Agent: a.ID, Err: fmt.Errorf("plan: agent id %q: want gpuN, gpuN-migK or gpuxN-K", a.ID)}
		}
		for _, g := range append([]GPU{a.GPU}, a.GPUs...) {
			if err := checkGPU(p.Runtime, g); err != nil {
				return &UnsafePlanError{Agent: a.ID, Err: fmt.Errorf("plan: agent %s: %w", a.ID, err)}
			}
		}
	}
	return nil
}

func checkGPU(rt contract.Runtime, g GPU) error {
	if g.PCIBus != "" && !pciAddress.MatchString(g.PCIBus) {
		return fmt.Errorf("GPU %d: PCI address %q: want dddd:bb:dd.f (hex)", g.Index, g.PCIBus)
	}
	if rt == contract.RuntimeROCm {
		if g.UUID != "" {
			if err := gpuid.AMD(g.UUID); err != nil {
				return fmt.Errorf("GPU %d: %w", g.Index, err)
			}
		}
		if !renderNode.MatchString(g.RenderNode) {
			return fmt.Errorf("GPU %d: render node %q: want /dev/dri/renderDN", g.Index, g.RenderNode)
		}
		return nil
	}
	if err := gpuid.NVIDIA(g.UUID); err != nil {
		return fmt.Errorf("GPU %d: %w", g.Index, err)
	}
	return nil
}

// checkEnvValues refuses a placement value a shell or systemd would
// read as more than one word: agent.env is written unquoted (systemd
// and `env $(grep -v '^#' agent.env)` read it alike), so only values
// shellquote leaves as they are may go there.
func checkEnvValues(id string, env []EnvVar) error {
	for _, e := range env {
		if e.Value == "" || shellquote.Quote(e.Value) != e.Value {
			return &UnsafePlanError{Agent: id, Err: fmt.Errorf("agent %s: %s=%q: a placement value must be letters, digits and _@%%+=:,./- only", id, e.Name, e.Value)}
		}
	}
	return nil
}
