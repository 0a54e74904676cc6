package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/nvmlhelper"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/resultfile"
	"github.com/gpu-mode/kbgen/signing"
)

// RunOptions configure Run, the whole of `kbgen run` (the eval step's
// command in the container). Environ is the only environment Run reads:
// the job (KERNELBOT_PAYLOAD*), the queue binding, KBGEN_REQUIRE_GPU,
// KBGEN_NOISE_POLICY and the retry count come from it.
type RunOptions struct {
	// PayloadFile holds the job ("-" reads Stdin); "" reads
	// KERNELBOT_PAYLOAD* from Environ.
	PayloadFile string
	Stdin       io.Reader
	// Out is where result.json goes; it is written whatever happens,
	// once the options themselves are sound.
	Out string
	// WorkDir, Keep: as in EvalOptions.
	WorkDir string
	Keep    bool
	// SystemFile, when set, holds the SystemInfo JSON to report instead
	// of probing the machine (tests).
	SystemFile string
	// RequireGPU: as in EvalOptions; contract.EnvRequireGPU in Environ sets it
	// too.
	RequireGPU bool
	// NoUpload: never publish, even with buildkite-agent on PATH.
	NoUpload bool
	// NoNoise: record no noise.json.
	NoNoise bool
	// Publish, when set, names a result.json written by an earlier Run:
	// it is published (see Publish) and nothing is evaluated.
	Publish string
	Environ []string
	// NVML is the kbgen-nvml helper the noise record reads NVIDIA GPUs
	// through, or why there is none (then nvidia-smi).
	NVML nvmlhelper.Location
	// Log receives the progress lines ("kbgen run: …"); nil discards them.
	Log io.Writer
	// Sealed, when set, is where the result leaves a sandboxed run (the
	// container's stdout): the job's key is read from Stdin before
	// anything runs, and result.json and noise.json go out as one sealed
	// envelope (package seal), the only copy the host believes. The files
	// under Out are then the submission's to tamper with; failing to
	// write them is only logged.
	Sealed io.Writer
}

// Outcome is what Run did.
type Outcome struct {
	// Result is the FullResult written to Out; nil when the options were
	// unsound before anything ran.
	Result *payload.FullResult
	// Noise is the noise record written beside Out, nil when none.
	Noise *noise.Record
	// PublishErr is why the upload or annotation failed (already logged);
	// it fails only a --publish run.
	PublishErr error
}

// Run reads the job, checks the step's queue binding, evaluates, records
// the noise and decides the noise retry, writes result.json (always) and
// noise.json, and publishes them when buildkite-agent is on PATH. The
// error carries the exit code (an exitcode.Coder: *Error, or a silent
// exitcode.Error when the cause was already logged); nil is exit 0.
func Run(ctx context.Context, opts RunOptions) (Outcome, error) {
	if opts.Publish != "" {
		return publishResult(ctx, opts)
	}
	key, err := opts.readKey()
	if err != nil {
		return Outcome{}, withFault(err)
	}
	shieldPID1(os.Getpid(), opts.Log)
	probe, err := LoadProbe(ctx, opts.SystemFile, opts.Environ)
	if err != nil {
		return Outcome{}, withFault(err)
	}
	var out Outcome
	var sampler *noise.Sampler
	mode := payload.Mode("")
	in, runErr := opts.job()
	if runErr != nil {
		info, _, _ := probe.Wait()
		out.Result = payload.Failed(info, runErr)
	} else {
		mode = in.Config.Mode
		eo := opts.evalOptions(probe)
		if !opts.NoNoise {
			// Every GPU the sandbox granted (a multi-GPU step's set), or
			// outside it the one the environment names.
			gpus, _ := grantedGPUs(opts.Environ)
			sampler = noise.NewSampler(noise.Config{
				Env: opts.Environ, GPU: noise.GPUFromEnv(opts.Environ, contract.EnvGPUUUID), GPUCount: gpus,
				// The helper lives for the job: started as the runner's own
				// child, spared by the sweep after each harness, closed here.
				NVML: opts.NVML, NVMLSupervisor: managedChildren{},
			})
			defer sampler.Close()
			eo.Noise, eo.GPUCount = sampler, sampler.NVMLGPUs
		}
		out.Result, runErr = Evaluate(ctx, in.Config, eo)
		runErr = opts.ownDiskFull(runErr)
	}
	out.Noise = opts.judgeNoise(sampler, mode, runErr == nil)
	// The sealed copy leaves first: in a sandbox it is the result, and
	// nothing the submission left in the out dir may hold it back.
	if err := opts.seal(key, out); err != nil && runErr == nil {
		runErr = err
	}
	files, werr := resultfile.Write(opts.Out, out.Result)
	switch {
	case werr != nil && opts.Sealed != nil:
		logf(opts.Log, "%v; the sealed copy on stdout is the result", werr)
		werr = nil
	case werr != nil && runErr != nil:
		logf(opts.Log, "%v", werr) // the run's own failure is the one returned
	case werr != nil:
		runErr = werr
	default:
		logf(opts.Log, "wrote %s (%s)", opts.Out, out.Result.Describe())
	}
	out.Noise = opts.writeNoise(out.Noise)
	if out.Noise != nil {
		files = append(files, contract.NoiseFile)
	}
	if !opts.NoUpload && werr == nil {
		if agent, err := bkagent.Find("", opts.Environ); err == nil {
			out.PublishErr = Publish(ctx, agent, opts.Out, files, mode, out.Result, out.Noise.Markdown())
			logLines(opts.Log, out.PublishErr)
		}
	}
	if runErr == nil && out.Noise != nil && out.Noise.Retry {
		runErr = machineFault("%s", out.Noise.RetryReason)
	}
	return out, withFault(runErr)
}

// ownDiskFull makes a full tmpfs in a sealed run (the sandbox's
// container, or the process launcher's pod with a memory-backed volume)
// the submission's fault instead of the machine's: the tmpfs is the job's
// own, so a submission that fills it in its test run could otherwise
// exit 75 and be run again elsewhere (issue 25). A full disk outside the
// sandbox, or on a disk-backed volume, stays the machine's.
func (o RunOptions) ownDiskFull(err error) error {
	if o.Sealed == nil || FaultOf(err) != FaultMachine || !diskFullOnTmpfs(err) {
		return err
	}
	return &Error{Fault: FaultSubmission, Err: fmt.Errorf("the job filled its own disk (a tmpfs of its container), not the machine's: %w", err)}
}

// job reads the job and refuses a step re-routed to another queue (where
// no sandbox in front has checked already).
func (o RunOptions) job() (*payload.Input, error) {
	lookup := o.lookup
	in, err := jobsource.FromBuild(o.PayloadFile, o.Stdin, lookup)
	if err != nil {
		return nil, err
	}
	if err := signing.CheckRunRouting(lookup); err != nil {
		return nil, &Error{Fault: FaultJob, Err: err}
	}
	return in, nil
}

func (o RunOptions) evalOptions(probe *Probe) EvalOptions {
	return EvalOptions{
		WorkDir:    o.WorkDir,
		Environ:    slices.Clone(o.Environ),
		Probe:      probe,
		RequireGPU: o.RequireGPU || truthy(o.getenv(contract.EnvRequireGPU)),
		Log:        o.Log,
		Keep:       o.Keep,
	}
}

// lookup is os.LookupEnv over Environ: the last entry for key wins.
func (o RunOptions) lookup(key string) (string, bool) {
	for i := len(o.Environ) - 1; i >= 0; i-- {
		if k, v, ok := strings.Cut(o.Environ[i], "="); ok && k == key {
			return v, true
		}
	}
	return "", false
}

func (o RunOptions) getenv(key string) string {
	v, _ := o.lookup(key)
	return v
}

// LoadProbe starts the SystemInfo probe, or reads systemFile when set,
// before the job is even parsed, so a failed result still says where it
// failed. A bad systemFile is a usage fault.
func LoadProbe(ctx context.Context, systemFile string, environ []string) (*Probe, error) {
	if systemFile == "" {
		return StartProbe(ctx, SubmissionEnv(environ, nil)), nil
	}
	b, err := os.ReadFile(systemFile)
	if err != nil {
		return nil, usageFault("reading --system: %w", err)
	}
	var info payload.SystemInfo
	if err := json.Unmarshal(b, &info); err != nil {
		return nil, usageFault("reading --system: %w", err)
	}
	return FixedProbe(info, info.GPU != ""), nil
}

// publishResult publishes an existing result (RunOptions.Publish): the
// host side of a containerised run, where the container has no agent.
func publishResult(ctx context.Context, o RunOptions) (Outcome, error) {
	res, agent, err := o.loadPublish()
	if err != nil {
		return Outcome{}, withFault(err)
	}
	// The mode is the job's when the build env carries it, else the one
	// the runs imply.
	mode := res.ImpliedMode()
	if in, err := jobsource.FromBuild("", nil, o.lookup); err == nil {
		mode = in.Config.Mode
	}
	files := resultfile.List(o.Publish)
	out := Outcome{Result: res}
	rec, err := noise.Read(filepath.Join(filepath.Dir(o.Publish), contract.NoiseFile))
	switch {
	case err == nil:
		files = append(files, contract.NoiseFile)
		out.Noise = rec
	case !errors.Is(err, fs.ErrNotExist):
		logf(o.Log, "%v; publishing without it", err)
	}
	facts := make(chan error, 1)
	go func() { facts <- publishFacts(context.WithoutCancel(ctx), agent, o.lookup, rec) }()
	out.PublishErr = Publish(ctx, agent, o.Publish, files, mode, res, rec.Markdown())
	if err := <-facts; err != nil {
		logf(o.Log, "run facts not published (kbgen serve's fleet view misses this run): %v", err)
	}
	logLines(o.Log, out.PublishErr)
	if out.PublishErr != nil {
		return out, exitcode.Silent(exitcode.Failure) // already logged
	}
	return out, nil
}

// loadPublish reads the result to publish and finds the agent CLI.
// A result.json is the container's to size: one larger than any client
// would download is refused unread, and the rest is decoded as a stream.
func (o RunOptions) loadPublish() (*payload.FullResult, *bkagent.Agent, error) {
	f, err := os.Open(o.Publish)
	if err != nil {
		return nil, nil, usageFault("reading --publish: %w", err)
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() || fi.Size() > payload.MaxResultBytes {
		return nil, nil, usageFault("--publish %s is not a regular file of at most %d MiB", o.Publish, payload.MaxResultBytes>>20)
	}
	var res payload.FullResult
	if err := json.NewDecoder(io.LimitReader(f, payload.MaxResultBytes)).Decode(&res); err != nil {
		return nil, nil, usageFault("--publish %s is not a FullResult: %w", o.Publish, err)
	}
	agent, err := bkagent.Find("", o.Environ)
	if err != nil {
		return nil, nil, usageFault("--publish: %w", err)
	}
	return &res, agent, nil
}

// judgeNoise judges the noise record against the vendor's policy and
// decides a retry (only for a ranked run that otherwise completed). It
// returns nil when no timed run was recorded.
func (o RunOptions) judgeNoise(s *noise.Sampler, mode payload.Mode, completed bool) *noise.Record {
	if s == nil || !s.Measured() {
		return nil
	}
	policy, err := noisepolicy.Parse(o.getenv(contract.EnvNoisePolicy))
	if err != nil {
		logf(o.Log, "%v; using the default noise policy", err)
		policy = noise.Policy{}.WithDefaults()
	}
	rec := s.Record(policy)
	if completed {
		rec.DecideRetry(mode.Ranked(), o.retries())
	}
	rec.SetAttempt(o.retries())
	return rec
}

// writeNoise writes rec as noise.json beside Out, or with no record
// removes a stale noise.json, so it cannot pass for this run's. It
// returns the record the run goes on with: nil when an unsealed run could
// not write it (then nothing claims it was recorded).
func (o RunOptions) writeNoise(rec *noise.Record) *noise.Record {
	path := filepath.Join(filepath.Dir(o.Out), contract.NoiseFile)
	if rec == nil {
		_ = os.Remove(path)
		return nil
	}
	if err := noise.Write(path, rec); err != nil {
		logf(o.Log, "%v", err)
		if o.Sealed == nil {
			return nil
		}
	} else {
		logf(o.Log, "wrote %s (%s, %.1f ms to record)", path, noiseSummary(rec), rec.CostMS)
	}
	if rec.RetryReason != "" {
		logf(o.Log, "%s", rec.RetryReason)
	}
	return rec
}

// retries is the job's BUILDKITE_RETRY_COUNT, as the sandbox passes it
// into the container or as the agent sets it.
func (o RunOptions) retries() string {
	if r := o.getenv(contract.EnvRetryCount); r != "" {
		return r
	}
	return o.getenv(contract.EnvBuildkiteRetryCount)
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

func truthy(s string) bool {
	switch s {
	case "1", "true", "TRUE", "True", "yes":
		return true
	}
	return false
}

// logf writes one progress line of kbgen run to w.
func logf(w io.Writer, format string, args ...any) {
	if w != nil {
		fmt.Fprintf(w, "kbgen run: "+format+"\n", args...)
	}
}

// logLines logs err one line per cause (errors.Join puts them on lines).
func logLines(w io.Writer, err error) {
	if err == nil {
		return
	}
	for _, line := range strings.Split(err.Error(), "\n") {
		logf(w, "%s", line)
	}
}
