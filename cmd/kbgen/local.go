package main

import (
	"cmp"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/runner"
)

// LocalCmd runs a whole job on this machine: generate its pipeline, then
// execute the eval step's command with the local runner.
type LocalCmd struct {
	JobFlags `embed:""`
	JSON     bool   `help:"Print only the FullResult JSON (no summary)." name:"json"`
	Out      string `help:"Write the FullResult JSON to FILE instead of stdout." placeholder:"FILE"`
	Queue    string `help:"Queue (vendor) whose pipeline is generated; its eval step's timeout bounds the run. Default: KERNELBOT_QUEUE, else the registry's first queue." placeholder:"QUEUE"`
	Vendors  string `help:"Vendor registry YAML replacing the built-in one. Default: KBGEN_VENDORS." placeholder:"FILE"`
	List     bool   `help:"List the built-in examples and their submissions, and exit."`
	Workdir  string `help:"Directory for the job's files. Default: a temporary directory, removed afterwards." placeholder:"DIR"`
	System   string `help:"Read SystemInfo from FILE instead of probing the machine (tests)." hidden:"" placeholder:"FILE"`
}

func (c *LocalCmd) Help() string {
	return `The main job on this machine, with no Buildkite, Docker or GPU: kbgen
generates the pipeline for the job (as the bootstrap step would), then runs
the eval step's "kbgen run" here with the same runner, and prints a summary
on stderr and Kernelbot's FullResult JSON on stdout.

  kbgen local                                     # vectoradd, leaderboard: passes
  kbgen local --example identity --mode test
  kbgen local --example identity --submission cheat-pipe   # caught: fails
  kbgen local --list                              # examples and their submissions

A Kernelbot task directory and a submission file, or a payload (from the
repository root, where the examples' task directories are):

  kbgen local --task examples/vectoradd --submission examples/vectoradd/wrong.py --mode test   # fails
  kbgen encode --example identity --mode test > job.b64
  kbgen local --payload-file job.b64 --json

With no job flag, the job is the built-in vectoradd example; examples and
tasks run in leaderboard mode unless --mode says otherwise, a payload in its
own mode. The built-in examples are the task directories under examples/,
embedded: plain Python 3 (no packages) written to Kernelbot's protocol. Their cheat submissions are the ones a leaderboard
sees: cheat-pipe and cheat-exit forge "check: pass" on the verdict pipe,
cheat-input rewrites its input in place, cheat-files rewrites the harness
during the warm-up, cheat-daemon leaves a detached process holding the pipe,
cheat-env looks for secrets in its environment.

Exit codes: 0 every run passed, 1 the job ran but a run failed (compile,
test, crash, timeout), 65 invalid job, 75 this machine cannot run it (for
example profile mode without a GPU), 2 bad flags.`
}

func (c *LocalCmd) Run(g *Globals) error {
	if c.List {
		return examples.WriteList(g.Stdout)
	}
	ctx, stop := signalContext()
	defer stop()
	_, err := runner.Local(ctx, runner.LocalOptions{
		Job: c.source(), Stdin: g.Stdin,
		Queue: cmp.Or(c.Queue, g.Getenv(contract.EnvQueue)), Vendors: cmp.Or(c.Vendors, g.Getenv(contract.EnvVendors)),
		Out: c.Out, Stdout: g.Stdout, WorkDir: c.Workdir, SystemFile: c.System, Environ: g.Environ(),
		Log: g.Stderr, Quiet: c.JSON,
	})
	return err
}
