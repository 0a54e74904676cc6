package main

import (
	"cmp"
	"encoding/json"
	"io"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/qualify"
)

// NodeQualifyCmd measures whether each agent's placement gives
// trustworthy timings.
type NodeQualifyCmd struct {
	machineFlags `embed:""`
	Root         string        `default:"/" placeholder:"DIR" help:"Read the plan installed under DIR (kbgen node install); when none is installed the machine is planned afresh with the flags above. Example: --root /tmp/stage"`
	Image        string        `placeholder:"IMAGE" help:"Image the calibration containers run (any image: the static kbgen is mounted into it). Default: the vendor registry's image for the plan's queue. Example: --image ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1"`
	Vendors      string        `placeholder:"FILE" help:"Vendor registry YAML replacing the built-in one (for the default --image). Default: KBGEN_VENDORS."`
	NoSandbox    bool          `name:"no-sandbox" help:"Run the calibration and the load as processes pinned to each agent's CPUs (sched_setaffinity) instead of through the sandbox's docker run: for a host without docker."`
	NoGPU        bool          `name:"no-gpu" help:"Leave the GPU flags out of the containers (a node whose engine has no GPU runtime). Also KBGEN_SANDBOX_NO_GPU=1."`
	Runs         int           `default:"8" placeholder:"N" help:"Calibration runs per phase (quiet, loaded); the CV is over their means. Example: --runs 40"`
	Reps         int           `default:"5" placeholder:"N" help:"Repetitions per run. Example: --reps 10"`
	Blocks       int           `default:"4" placeholder:"N" help:"Alternating quiet/loaded block pairs the runs are split into (ABAB…, the others' load started and stopped per block), so a drifting machine does not show as a shift. Example: --blocks 8"`
	RepTime      time.Duration `default:"12ms" name:"rep-time" placeholder:"D" help:"About how long one repetition of the kernel takes on this machine (sizes its work once, here). Example: --rep-time 50ms"`
	MaxCV        float64       `default:"1" name:"max-cv" placeholder:"PCT" help:"Fail an agent whose quiet run-to-run CV is above PCT percent."`
	MaxShift     float64       `default:"2" name:"max-shift" placeholder:"PCT" help:"Fail an agent whose mean moves more than PCT percent when the others are loaded."`
	MaxSteal     float64       `default:"5" name:"max-steal" placeholder:"PCT" help:"Fail an agent whose runs saw more than PCT percent hypervisor steal."`
	Floating     bool          `help:"Give every agent all the node's CPUs (the unpinned setup kbgen replaces), to see what pinning buys."`
	GPU          string        `default:"auto" enum:"auto,on,off" help:"The GPU part (fp16 matmuls timed with CUDA events, by the host's python3 with torch; with --no-sandbox): auto runs it where torch sees a GPU, on requires it, off skips it."`
	JSON         bool          `name:"json" help:"Print the report as JSON: agents[].name, cv_percent, shift_percent, steal_percent, verdict, ..."`
}

func (c *NodeQualifyCmd) Help() string {
	return `For every agent of the node (the installed plan, or the machine planned
afresh), a built-in calibration benchmark (an integer kernel on an L1-resident
buffer, one pinned thread, each run with a noise record) runs on the agent's
placement after a discarded warm-up, in --blocks alternating quiet and loaded
blocks (ABAB…: in each loaded block every other agent's placement runs a CPU +
memory-bandwidth load, started and stopped per block), so a machine that
drifts slowly does not show as a shift; an agent alone on its node runs quiet
blocks only. Per agent: the quiet run-to-run CV, the shift of the mean under
load, the worst hypervisor steal, the noise sources the records saw, and a
verdict against --max-cv, --max-shift and --max-steal. Exit 1 when an agent
fails. The default run takes tens of seconds; raise --runs and
--rep-time for a longer, steadier one.

  kbgen node qualify                               # through the sandbox (docker)
  kbgen node qualify --no-sandbox --json           # a host without docker
  kbgen node qualify --root /tmp/stage --image ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1 --no-gpu
  kbgen node qualify --floating                    # the unpinned setup, for comparison

Rehearse it anywhere from a checkout, on the one-GPU fixture node (its one
agent gets CPU 1 of this machine, so the verdict is this machine's):

  kbgen node qualify --no-sandbox --sysfs node/testdata/rehearsal/sys --nvidia-smi node/testdata/rehearsal/nvidia-smi.csv --reserve-memory 1g --gpu off   # PASS or FAIL

What a FAIL means: the named agents' timings cannot be trusted as they are
(the verdict column says which threshold: CV, shift under load, steal). The
vendor reads it first: the usual causes are a VM's steal (ask for dedicated
hosts), host processes on the agent's CPUs (kbgen doctor's housekeeping check)
or neighbours sharing cores or memory bandwidth. Send the report (--json) to
the Kernelbot operators with the node; they decide whether the queue goes live.
Nothing is changed on the node and no agent is stopped by a FAIL. A container
that cannot start (no GPU runtime, image not pulled) is reported with docker's
own reason.`
}

func (c *NodeQualifyCmd) Run(g *Globals) error {
	ctx, stop := signalContext()
	defer stop()
	opts, err := qualify.Prepare(ctx, c.setup(g))
	if err != nil {
		return err
	}
	rep, err := qualify.Qualify(ctx, opts)
	if err != nil {
		return err
	}
	write := map[bool]func(io.Writer) error{false: rep.WriteTable, true: rep.WriteJSON}[c.JSON]
	return cmp.Or(write(g.Stdout), rep.Err())
}

// setup is the flags as qualify.Prepare takes them.
func (c *NodeQualifyCmd) setup(g *Globals) qualify.Setup {
	return qualify.Setup{
		Root: c.Root, Machine: c.source(g, ""), Image: c.Image, Vendors: cmp.Or(c.Vendors, g.Getenv(contract.EnvVendors)),
		NoSandbox: c.NoSandbox, NoGPU: c.NoGPU || g.Getenv(contract.EnvSandboxNoGPU) == "1", GPU: qualify.GPUMode(c.GPU),
		Options: qualify.Options{
			Runs: c.Runs, Reps: c.Reps, Blocks: c.Blocks, RepDuration: c.RepTime,
			MaxCV: c.MaxCV, MaxShift: c.MaxShift, MaxSteal: c.MaxSteal, Floating: c.Floating, Log: g.Stderr,
		},
	}
}

// NodeCalibrateCmd is the calibration (or the load) qualify runs on each
// placement, inside the container or pinned on the host.
type NodeCalibrateCmd struct {
	Runs       int           `default:"8" help:"Runs."`
	Reps       int           `default:"5" help:"Repetitions per run."`
	Iterations int           `default:"0" help:"Kernel steps per repetition (0: about 12 ms here)."`
	CPUs       string        `name:"cpus" placeholder:"LIST" help:"Pin to these CPUs (default: this process's)."`
	Load       bool          `help:"Run the CPU + memory-bandwidth load instead, on every CPU, for --duration."`
	NoPin      bool          `name:"no-pin" help:"Do not pin the kernel's thread (the floating setup); the noise records cover all allowed CPUs."`
	Duration   time.Duration `default:"60s" help:"How long the load runs."`
}

func (c *NodeCalibrateCmd) Run(g *Globals) error {
	ctx, stop := signalContext()
	defer stop()
	cal, err := qualify.Here{CPUs: c.CPUs, Load: c.Load, Duration: c.Duration, Runs: c.Runs, Reps: c.Reps, Iterations: c.Iterations, NoPin: c.NoPin}.Run(ctx)
	if err != nil || cal == nil {
		return err
	}
	return json.NewEncoder(g.Stdout).Encode(cal)
}
