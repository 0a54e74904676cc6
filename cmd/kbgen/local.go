package main

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/runner"
	"github.com/gpu-mode/kbgen/steps"
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
		for _, e := range examples.List() {
			fmt.Fprintf(g.Stdout, "%-10s %s\n           submissions: %s\n", e.Name, e.Description, strings.Join(e.Submissions, ", "))
		}
		return nil
	}
	in, err := c.load(g, jobsource.Options{DefaultExample: true, DefaultMode: payload.ModeLeaderboard})
	if err != nil {
		return err
	}
	cfg := in.Config
	step, err := c.evalStep(g, in)
	if err != nil {
		return err
	}
	if !c.JSON {
		fmt.Fprintf(g.Stderr, "kbgen local: %s job, mode %s; pipeline for queue %s: eval step %q, timeout %s\n", cfg.Lang, cfg.Mode, step.Queue, steps.RunCommand, step.Timeout())
	}

	ctx, stop := signalContext()
	defer stop()
	probe, err := runner.LoadProbe(ctx, c.System, g.Environ())
	if err != nil {
		return withCode(runner.ExitCode(err), err)
	}
	opts := runner.Options{WorkDir: c.Workdir, Environ: g.Environ(), Probe: probe, MaxTimeout: step.Timeout()}
	if !c.JSON {
		opts.Log = g.Stderr
	}
	res, runErr := runner.Evaluate(ctx, cfg, opts)

	if !c.JSON {
		runner.WriteSummary(g.Stderr, cfg.Mode, res)
	}
	if err := c.print(g, res); err != nil {
		return err
	}
	switch {
	case runErr != nil:
		return withCode(runner.ExitCode(runErr), runErr)
	case !runner.AllPassed(res):
		return silentExit(exitcode.Failure)
	}
	return nil
}

// evalStep plans the job's eval step as the bootstrap step would, on
// --queue, else KERNELBOT_QUEUE, else the registry's first queue.
func (c *LocalCmd) evalStep(g *Globals, in *payload.Input) (*steps.Eval, error) {
	reg, err := loadRegistry(g, c.Vendors)
	if err != nil {
		return nil, err
	}
	vendor, err := reg.LookupOrFirst(cmp.Or(c.Queue, g.Getenv(contract.EnvQueue)))
	if err != nil {
		return nil, withCode(exitcode.Usage, err)
	}
	return pipelinegen.PlanEval(pipelinegen.Job{Input: in, RunID: "local", Queue: vendor.Queue}, vendor, pipelinegen.Options{})
}

func (c *LocalCmd) print(g *Globals, res *payload.FullResult) error {
	if c.Out != "" {
		if _, err := runner.WriteResult(c.Out, res); err != nil {
			return err
		}
		if !c.JSON {
			fmt.Fprintf(g.Stderr, "kbgen local: wrote %s\n", c.Out)
		}
		return nil
	}
	b, err := runner.MarshalResult(res)
	if err != nil {
		return err
	}
	_, err = g.Stdout.Write(b)
	return err
}
