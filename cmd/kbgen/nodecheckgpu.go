package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/gpu-mode/kbgen/sandbox"
)

// NodeCheckGPUCmd is the clean-GPU check of one agent, outside a job: its
// unit runs it before every start, and an operator by hand.
type NodeCheckGPUCmd struct {
	IfOut bool `name:"if-out" help:"Check only an agent that machine faults in a row took out of rotation (its unit's ExecStartPre); any other passes at once."`
}

// Help is shown after the flags.
func (c *NodeCheckGPUCmd) Help() string {
	return fmt.Sprintf(`Runs the clean-GPU check kbgen sandbox runs before every job (no foreign
process or KFD queue, memory free, no new ECC/RAS errors, no machine Xid or
amdgpu timeout since the last job; docs/isolation.md) on the GPUs of the
agent whose placement is in the environment (KERNELBOT_GPU_UUID or
KERNELBOT_GPU_RENDER_NODE, as in its agent.env), holding their lease, and
resets a dirty GPU first where KBGEN_GPU_RESET=1.

After %d machine faults (exit 75) in a row an agent stays out of rotation:
its unit runs this with --if-out before every start, and a failure keeps
it stopped (systemd tries again after RestartSec, 60 s). A pass clears
the agent's count (faults-<gpu>-x<n> in KBGEN_LEASE_DIR, /run/kbgen) and
it starts. Exit 0: clean (or, with --if-out, not out of rotation); 75:
not clean, or its GPUs leased to another job.

By hand, on a node, for the agent of GPU 3:

    sudo -u buildkite-agent env $(grep -v '^#' /etc/buildkite-agent/kbgen/gpu3/agent.env) kbgen node check-gpu`, sandbox.FaultLimit)
}

func (c *NodeCheckGPUCmd) Run(g *Globals) error {
	logf := func(format string, args ...any) { fmt.Fprintf(g.Stderr, format+"\n", args...) }
	r, err := sandbox.Readmit(context.Background(), g.LookupEnv, c.IfOut, logf)
	if err != nil {
		if len(r.GPUs) > 0 {
			fmt.Fprintf(g.Stderr, "kbgen node check-gpu: %s: %d machine fault(s) in a row; this agent stays out of rotation\n", strings.Join(r.GPUs, ", "), r.Faults)
		}
		return err
	}
	if !r.Checked {
		fmt.Fprintf(g.Stdout, "%s: %d machine fault(s) in a row (limit %d): in rotation, not checked\n", strings.Join(r.GPUs, ", "), r.Faults, sandbox.FaultLimit)
		return nil
	}
	fmt.Fprintf(g.Stdout, "%s: clean; %d machine fault(s) in a row cleared: in rotation\n", strings.Join(r.GPUs, ", "), r.Faults)
	return nil
}
