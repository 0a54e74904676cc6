package main

import "github.com/gpu-mode/kbgen/runner"

// RunCmd evaluates the job inside the container and writes result.json.
type RunCmd struct {
	PayloadFile string `help:"Read the job from FILE (- for stdin) instead of KERNELBOT_PAYLOAD*; the encoded payload or the plain JSON config. Example: --payload-file job.b64" placeholder:"FILE"`
	Workdir     string `help:"Directory for the job's files (created; fresh sub-directories per run). Default: a new temporary directory, removed afterwards. Example: --workdir /work" placeholder:"DIR"`
	Out         string `help:"Where to write the FullResult JSON; always written, even when the job is invalid or the runner fails. Profile traces go to profile_data/ beside it." default:"${result_file}" placeholder:"FILE"`
	NoUpload    bool   `help:"Do not upload result.json or annotate the build, even when buildkite-agent is on PATH."`
	RequireGPU  bool   `help:"Treat 'no GPU visible' as the machine's fault (exit 75, retried elsewhere). Also set by KBGEN_REQUIRE_GPU=1." name:"require-gpu"`
	Publish     string `help:"Evaluate nothing: upload FILE (a result.json written by an earlier kbgen run) and the profile_data/ beside it with buildkite-agent, and annotate the build. For the host side of a containerised run, where the container has no agent. Example: --publish result.json" placeholder:"FILE"`
	System      string `help:"Read SystemInfo from FILE instead of probing the machine (tests)." hidden:"" placeholder:"FILE"`
	Keep        bool   `help:"Keep the work files (debugging)." hidden:""`
	NoNoise     bool   `help:"Do not record noise.json (the noise around each benchmark and leaderboard run)." name:"no-noise"`
	Sealed      bool   `help:"Read the job's result key from stdin first, and write result.json and noise.json to stdout as one HMAC-sealed envelope: the only copy kbgen sandbox believes (it passes this flag; docs/formats.md#the-sealed-result)."`
}

func (c *RunCmd) Help() string {
	return `The eval step's command inside the container. It reads the job, runs it
as Kernelbot's run_eval.py does (py: warm-up "python3 submission.py", then
"python3 <main> <mode> <cases>"; cu: nvcc, then ./eval.out), and writes
Kernelbot's FullResult to --out:

  kbgen encode --example identity --mode test > job.b64
  kbgen run --payload-file job.b64 --out result.json --no-upload

Around each benchmark and leaderboard run it records what could disturb the
timing (hypervisor steal, cgroup throttling, context switches, CPU
frequency, foreign processes on its CPUs, GPU clocks, throttle reasons,
temperature, power, ECC errors, other processes on its GPU) and writes
noise.json beside result.json, verdict clean or noisy (docs/runner.md).
KBGEN_NOISE_POLICY (set from the vendor registry) holds the thresholds; with
retry=true a leaderboard or private run disturbed by noise the submission
cannot cause exits 75 once, so Buildkite runs it on another agent.

With buildkite-agent on PATH (and no --no-upload) it sets result.json as the
build's meta-data kbgen_result (stamped with the job; an artifact instead
when too large), uploads noise.json and any profile_data/*.zip as artifacts
and annotates the build with a summary (docs/formats.md).
A containerised run has no agent; the host publishes its result afterwards:

  kbgen run --publish result.json      # meta-data + upload + annotate, evaluate nothing

The submission sees only an allow-listed environment (PATH, HOME, LANG,
PYTHON*, CUDA/ROCm/NVIDIA/HIP variables, TORCH*/TRITON*, POPCORN_* ...):
never KERNELBOT_PAYLOAD*, BUILDKITE_* or anything named like a token.

Exit codes (result.json is written in every case):
  0   the evaluation ran, whatever the submission did
  65  the job is invalid (never retried)
  75  this machine is at fault: no GPU visible (with --require-gpu), a GPU
      runtime failure in the test run that the runner's own probe confirms,
      disk full, missing interpreter or profiler, or (once) external noise
      under a retry policy (retried)
  143 stopped by SIGTERM or SIGINT (a cancelled build)
  1   the runner itself failed (with --publish: the upload or annotation failed)
  2   bad flags, or --payload-file cannot be read`
}

func (c *RunCmd) Run(g *Globals) error {
	ctx, stop := signalContext()
	defer stop()
	opts := runner.RunOptions{
		PayloadFile: c.PayloadFile,
		Stdin:       g.Stdin,
		Out:         c.Out,
		WorkDir:     c.Workdir,
		Keep:        c.Keep,
		SystemFile:  c.System,
		RequireGPU:  c.RequireGPU,
		NoUpload:    c.NoUpload,
		NoNoise:     c.NoNoise,
		Publish:     c.Publish,
		Environ:     g.Environ(),
		NVML:        g.NVML(),
		Log:         g.Stderr,
	}
	if c.Sealed {
		opts.Sealed = g.Stdout
	}
	_, err := runner.Run(ctx, opts)
	return err
}
