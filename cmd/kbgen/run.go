package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/runner"
	"github.com/gpu-mode/kbgen/signing"
)

// RunCmd evaluates the job inside the container and writes result.json.
type RunCmd struct {
	PayloadFile string `help:"Read the job from FILE (- for stdin) instead of KERNELBOT_PAYLOAD*; the encoded payload or the plain JSON config. Example: --payload-file job.json" placeholder:"FILE"`
	Workdir     string `help:"Directory for the job's files (created; fresh sub-directories per run). Default: a new temporary directory, removed afterwards. Example: --workdir /work" placeholder:"DIR"`
	Out         string `help:"Where to write the FullResult JSON; always written, even when the job is invalid or the runner fails. Profile traces go to profile_data/ beside it." default:"${result_file}" placeholder:"FILE"`
	NoUpload    bool   `help:"Do not upload result.json or annotate the build, even when buildkite-agent is on PATH."`
	RequireGPU  bool   `help:"Treat 'no GPU visible' as the machine's fault (exit 75, retried elsewhere). Also set by KBGEN_REQUIRE_GPU=1." name:"require-gpu"`
	Publish     string `help:"Evaluate nothing: upload FILE (a result.json written by an earlier kbgen run) and the profile_data/ beside it with buildkite-agent, and annotate the build. For the host side of a containerised run, where the container has no agent. Example: --publish result.json" placeholder:"FILE"`
	System      string `help:"Read SystemInfo from FILE instead of probing the machine (tests)." hidden:"" placeholder:"FILE"`
	Keep        bool   `help:"Keep the work files (debugging)." hidden:""`
	NoNoise     bool   `help:"Do not record noise.json (the noise around each benchmark and leaderboard run)." name:"no-noise"`
}

func (c *RunCmd) Help() string {
	return `The eval step's command inside the container. It reads the job, runs it
as Kernelbot's run_eval.py does (py: warm-up "python3 submission.py", then
"python3 <main> <mode> <cases>"; cu: nvcc, then ./eval.out), and writes
Kernelbot's FullResult to --out:

  kbgen run --payload-file job.json --out result.json --no-upload

Around each benchmark and leaderboard run it records what could disturb the
timing (hypervisor steal, cgroup throttling, context switches, CPU
frequency, foreign processes on its CPUs, GPU clocks, throttle reasons,
temperature, power, ECC errors, other processes on its GPU) and writes
noise.json beside result.json, verdict clean or noisy (docs/runner.md).
KBGEN_NOISE_POLICY (set from the vendor registry) holds the thresholds; with
retry=true a leaderboard or private run disturbed by noise the submission
cannot cause exits 75 once, so Buildkite runs it on another agent.

With buildkite-agent on PATH (and no --no-upload) it uploads result.json,
noise.json and any profile_data/*.zip as artifacts and annotates the build
with a summary.
A containerised run has no agent; the host publishes its result afterwards:

  kbgen run --publish result.json      # upload + annotate, evaluate nothing

The submission sees only an allow-listed environment (PATH, HOME, LANG,
PYTHON*, CUDA/ROCm/NVIDIA/HIP variables, TORCH*/TRITON*, POPCORN_* ...):
never KERNELBOT_PAYLOAD*, BUILDKITE_* or anything named like a token.

Exit codes (result.json is written in every case):
  0   the evaluation ran, whatever the submission did
  65  the job is invalid (never retried)
  75  this machine is at fault: no GPU visible (with --require-gpu), GPU
      runtime failure, disk full, missing interpreter or profiler, or (once)
      external noise under a retry policy (retried)
  143 stopped by SIGTERM or SIGINT (a cancelled build)
  1   the runner itself failed (with --publish: the upload or annotation failed)
  2   bad flags, or --payload-file cannot be read`
}

func (c *RunCmd) Run(g *Globals) error {
	ctx, stop := signalContext()
	defer stop()
	if c.Publish != "" {
		return c.publish(ctx, g)
	}
	requireGPU := c.RequireGPU || truthy(g.Getenv(contract.EnvRequireGPU))
	probe, err := c.probe(ctx, g)
	if err != nil {
		return err
	}

	var res *payload.FullResult
	var runErr error
	var sampler *noise.Sampler
	mode := payload.Mode("")
	in, err := readJob(g, c.PayloadFile)
	if err == nil {
		err = withCode(exitcode.BadJob, signing.CheckRunRouting(g.LookupEnv))
	}
	if err != nil {
		info, _, _ := probe.Wait()
		res, runErr = payload.Failed(info, err), err
	} else {
		mode = in.Config.Mode
		opts := runner.Options{
			WorkDir:    c.Workdir,
			Environ:    g.Environ(),
			Probe:      probe,
			RequireGPU: requireGPU,
			Log:        g.Stderr,
			Keep:       c.Keep,
		}
		if !c.NoNoise {
			sampler = noise.NewSampler(noise.Config{Env: g.Environ(), GPU: noise.GPUFromEnv(g.Environ(), contract.EnvGPUUUID)})
			opts.Noise = sampler
		}
		res, runErr = runner.Evaluate(ctx, in.Config, opts)
	}
	files, werr := runner.WriteResult(c.Out, res)
	if werr != nil {
		fmt.Fprintf(g.Stderr, "kbgen: %v\n", werr)
		if runErr == nil {
			runErr = werr
		}
	} else {
		fmt.Fprintf(g.Stderr, "kbgen run: wrote %s (%s)\n", c.Out, describe(res))
	}
	rec := writeNoise(g, c.Out, sampler, mode, runErr == nil && werr == nil)
	if rec != nil {
		files = append(files, contract.NoiseFile)
	}
	if !c.NoUpload && werr == nil {
		if agent, err := bkagent.Find("", g.Environ()); err == nil {
			c.report(g, runner.Publish(ctx, agent, c.Out, files, mode, res, rec.Markdown()))
		}
	}
	if runErr == nil && rec != nil && rec.Retry {
		return withCode(exitcode.TempFail, errors.New(rec.RetryReason))
	}
	if runErr == nil {
		return nil
	}
	var ee *exitError
	if errors.As(runErr, &ee) {
		return runErr
	}
	return withCode(runExitCode(runErr), runErr)
}

// publish uploads and annotates an existing result (see --publish).
func (c *RunCmd) publish(ctx context.Context, g *Globals) error {
	b, err := os.ReadFile(c.Publish)
	if err != nil {
		return withCode(exitcode.Usage, fmt.Errorf("reading --publish: %w", err))
	}
	var res payload.FullResult
	if err := json.Unmarshal(b, &res); err != nil {
		return withCode(exitcode.Usage, fmt.Errorf("--publish %s is not a FullResult: %w", c.Publish, err))
	}
	agent, err := bkagent.Find("", g.Environ())
	if err != nil {
		return withCode(exitcode.Usage, fmt.Errorf("--publish: %w", err))
	}
	// The mode is the job's when the build env carries it, else the one
	// the runs imply.
	mode := res.ImpliedMode()
	if in, err := readJob(g, ""); err == nil {
		mode = in.Config.Mode
	}
	files := runner.ResultFiles(c.Publish)
	rec, err := noise.Read(filepath.Join(filepath.Dir(c.Publish), contract.NoiseFile))
	switch {
	case err == nil:
		files = append(files, contract.NoiseFile)
	case !errors.Is(err, fs.ErrNotExist):
		fmt.Fprintf(g.Stderr, "kbgen run: %v; publishing without it\n", err)
	}
	if !c.report(g, runner.Publish(ctx, agent, c.Publish, files, mode, &res, rec.Markdown())) {
		return silentExit(exitcode.Failure)
	}
	return nil
}

// report prints a publish failure, one line per cause, and says whether
// there was none.
func (c *RunCmd) report(g *Globals, err error) bool {
	if err == nil {
		return true
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintf(g.Stderr, "kbgen run: %s\n", line)
	}
	return false
}

// probe starts the SystemInfo probe (or reads --system) before the job is
// even parsed, so a failed result still says where it failed.
func (c *RunCmd) probe(ctx context.Context, g *Globals) (*runner.Probe, error) {
	if c.System == "" {
		return runner.StartProbe(ctx, runner.SubmissionEnv(g.Environ(), nil)), nil
	}
	b, err := os.ReadFile(c.System)
	if err != nil {
		return nil, withCode(exitcode.Usage, fmt.Errorf("reading --system: %w", err))
	}
	var info payload.SystemInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, withCode(exitcode.Usage, fmt.Errorf("reading --system: %w", err))
	}
	return runner.FixedProbe(info, info.GPU != ""), nil
}

// runExitCode maps a runner failure to the exit-code table.
func runExitCode(err error) int {
	switch runner.FaultOf(err) {
	case runner.FaultJob:
		return exitcode.BadJob
	case runner.FaultMachine:
		return exitcode.TempFail
	case runner.FaultCanceled:
		return exitcode.Canceled
	}
	return exitcode.Failure
}

// describe is the one-line state of a result.
func describe(res *payload.FullResult) string {
	switch {
	case !res.Success:
		return "runner failed: " + res.Error
	case runner.AllPassed(res):
		return "evaluated; all runs passed"
	}
	return "evaluated; not all runs passed"
}

func truthy(s string) bool {
	switch s {
	case "1", "true", "TRUE", "True", "yes":
		return true
	}
	return false
}

// writeNoise judges the noise record against the vendor's policy, decides
// a retry (only for a ranked run that otherwise completed), and writes
// noise.json beside out. It returns nil when no timed run was recorded;
// a stale noise.json is removed then, so it cannot pass for this run's.
func writeNoise(g *Globals, out string, s *noise.Sampler, mode payload.Mode, completed bool) *noise.Record {
	path := filepath.Join(filepath.Dir(out), contract.NoiseFile)
	if s == nil || !s.Measured() {
		_ = os.Remove(path)
		return nil
	}
	policy, err := noise.ParsePolicy(g.Getenv(contract.EnvNoisePolicy))
	if err != nil {
		fmt.Fprintf(g.Stderr, "kbgen run: %v; using the default noise policy\n", err)
		policy = noise.Policy{}.WithDefaults()
	}
	rec := s.Record(policy)
	if completed {
		retries := g.Getenv(contract.EnvRetryCount)
		if retries == "" {
			retries = g.Getenv(contract.EnvBuildkiteRetryCount)
		}
		rec.DecideRetry(mode.Ranked(), retries)
	}
	if err := noise.Write(path, rec); err != nil {
		fmt.Fprintf(g.Stderr, "kbgen: %v\n", err)
		return nil
	}
	fmt.Fprintf(g.Stderr, "kbgen run: wrote %s (%s, %.1f ms to record)\n", path, noiseSummary(rec), rec.CostMS)
	if rec.RetryReason != "" {
		fmt.Fprintf(g.Stderr, "kbgen run: %s\n", rec.RetryReason)
	}
	return rec
}

// noiseSummary is the verdict and its reasons on one line.
func noiseSummary(rec *noise.Record) string {
	if rec.Verdict == noise.Clean {
		return "clean"
	}
	msgs := make([]string, 0, len(rec.Reasons))
	for _, r := range rec.Reasons {
		msgs = append(msgs, r.Run+": "+r.Message)
	}
	return "noisy: " + strings.Join(msgs, "; ")
}
