package runner

import (
	"context"
	"fmt"
	"io"
	"slices"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/resultfile"
	"github.com/gpu-mode/kbgen/steps"
)

// LocalOptions configure Local, the whole of `kbgen local`: a job run on
// this machine as its eval step would run it, with no Buildkite, Docker or
// GPU.
type LocalOptions struct {
	// Job names the job; none is the built-in example, in leaderboard mode
	// unless Job.Mode says otherwise. Stdin is read for Job.PayloadFile "-".
	Job   jobsource.Source
	Stdin io.Reader
	// Queue picks the registry's vendor ("": the first); Vendors is the
	// registry file ("": the built-in one).
	Queue, Vendors string
	// Out is where result.json goes; "": the FullResult JSON to Stdout.
	Out    string
	Stdout io.Writer
	// WorkDir and SystemFile: as in RunOptions.
	WorkDir, SystemFile string
	Environ             []string
	// Log receives the plan, the progress and the summary, unless Quiet
	// (--json: only the FullResult is written).
	Log   io.Writer
	Quiet bool
}

// Local is Run's twin on a developer's machine: it loads the job, plans
// its eval step as the bootstrap step would (the step's timeout bounds the
// run), evaluates it here and writes the FullResult. The error carries the
// exit code (exitcode.Of): Run's for a runner failure, 1 when the job ran
// but a run failed, 2 for bad options, 65 for a bad job.
func Local(ctx context.Context, o LocalOptions) (*payload.FullResult, error) {
	if o.Quiet {
		o.Log = nil
	}
	in, err := jobsource.Load(o.Job, jobsource.Options{Stdin: o.Stdin, DefaultExample: true, DefaultMode: payload.ModeLeaderboard})
	if err != nil {
		return nil, err
	}
	step, err := o.evalStep(in)
	if err != nil {
		return nil, err
	}
	localf(o.Log, "%s job, mode %s; pipeline for queue %s: eval step %q, timeout %s", in.Config.Lang, in.Config.Mode, step.Queue, steps.RunCommand, step.Timeout())
	probe, err := LoadProbe(ctx, o.SystemFile, o.Environ)
	if err != nil {
		return nil, withFault(err)
	}
	res, runErr := Evaluate(ctx, in.Config, EvalOptions{WorkDir: o.WorkDir, Environ: slices.Clone(o.Environ), Probe: probe, MaxTimeout: step.Timeout(), Log: o.Log})
	if o.Log != nil {
		WriteSummary(o.Log, in.Config.Mode, res)
	}
	if err := o.write(res); err != nil {
		return res, err
	}
	if runErr != nil {
		return res, withFault(runErr)
	}
	if !res.AllPassed() {
		return res, exitcode.Silent(exitcode.Failure)
	}
	return res, nil
}

// evalStep plans the job's eval step on o.Queue's vendor.
func (o LocalOptions) evalStep(in *payload.Input) (*steps.Eval, error) {
	reg, err := registry.Load(o.Vendors)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	vendor, err := reg.LookupOrFirst(o.Queue)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return pipelinegen.EvalFor(pipelinegen.Job{Input: in, RunID: "local", Queue: vendor.Queue}, vendor, pipelinegen.Options{})
}

// write writes res to o.Out, or its JSON to o.Stdout.
func (o LocalOptions) write(res *payload.FullResult) error {
	if o.Out != "" {
		if _, err := resultfile.Write(o.Out, res); err != nil {
			return err
		}
		localf(o.Log, "wrote %s", o.Out)
		return nil
	}
	b, err := resultfile.Marshal(res)
	if err != nil {
		return err
	}
	_, err = o.Stdout.Write(b)
	return err
}

func localf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "kbgen local: "+format+"\n", args...)
	}
}
