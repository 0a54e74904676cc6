package runner

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/shellquote"
	"github.com/gpu-mode/kbgen/payload"
)

// CompileTimeout is Kernelbot's Timeout.COMPILE: the py warm-up run and
// nvcc each get this long.
const CompileTimeout = 120 * time.Second

// EvalOptions configure one evaluation.
type EvalOptions struct {
	// WorkDir is where the job's files are written; it is created if
	// missing, and each run gets fresh sub-directories in it. "" means a
	// new temporary directory, removed afterwards.
	WorkDir string
	// Environ is the runner's environment (os.Environ form). The
	// submission sees only its allow-listed part (see AllowedEnv).
	Environ []string
	// Probe gathers SystemInfo; nil starts the real probes.
	Probe *Probe
	// RequireGPU makes "no GPU visible" a machine fault (exit 75 in the
	// CLI) instead of a CPU-only run. The sandbox sets contract.EnvRequireGPU in
	// every container it gives a GPU.
	RequireGPU bool
	// CompileTimeout overrides CompileTimeout (tests).
	CompileTimeout time.Duration
	// MaxTimeout, when set, caps every mode timeout (kbgen local uses the
	// eval step's timeout_in_minutes).
	MaxTimeout time.Duration
	// Log receives one progress line per step; nil discards them.
	Log io.Writer
	// Keep leaves the work files on disk (debugging).
	Keep bool
	// Noise, when set, is told when each timed run (benchmark and
	// leaderboard) starts and ends, to record the noise around it
	// (package noise, noise.json).
	Noise NoiseObserver
	// GPUCount, when set, is asked first whether the GPU still answers
	// after a test run printed a GPU runtime failure (Run: kbgen-nvml);
	// when it fails or counts none, nvidia-smi and rocm-smi are asked.
	GPUCount func() (int, error)
}

// NoiseObserver brackets each timed run: Begin just before the harness
// starts, End as soon as it and everything it started are gone.
type NoiseObserver interface {
	Begin(run string)
	End(run string)
}

// Evaluate runs cfg as Kernelbot's run_config does and returns the
// FullResult, which is never nil: on a runner failure it has success false,
// the error text, and the runs finished so far. The error is nil exactly
// when the evaluation ran; FaultOf tells whose fault it is otherwise.
//
// One Evaluate at a time per process: to catch what a harness leaves
// behind, it kills every child of this process that it did not start
// itself (the runner is a subreaper, so orphans become its children).
func Evaluate(ctx context.Context, cfg *payload.Config, opts EvalOptions) (*payload.FullResult, error) {
	probe := opts.Probe
	if probe == nil {
		probe = StartProbe(ctx, SubmissionEnv(opts.Environ, nil))
	}
	e := &evaluation{cfg: cfg, opts: opts, probe: probe, runs: map[string]payload.EvalResult{}}
	err := e.evaluate(ctx)
	system, _, _ := probe.Wait()
	if err != nil {
		if ctx.Err() != nil && FaultOf(err) == FaultInternal {
			err = &Error{Fault: FaultCanceled, Err: fmt.Errorf("cancelled: %w", context.Cause(ctx))}
		}
		return &payload.FullResult{Success: false, Error: err.Error(), System: system, Runs: e.runs}, err
	}
	return &payload.FullResult{Success: true, Error: "", System: system, Runs: e.runs}, nil
}

type evaluation struct {
	cfg   *payload.Config
	opts  EvalOptions
	probe *Probe
	runs  map[string]payload.EvalResult
}

func (e *evaluation) logf(format string, args ...any) {
	if e.opts.Log != nil {
		fmt.Fprintf(e.opts.Log, "kbgen run: "+format+"\n", args...)
	}
}

func (e *evaluation) evaluate(ctx context.Context) error {
	if err := e.cfg.Validate(); err != nil {
		return err
	}
	if e.opts.WorkDir == "" {
		dir, err := os.MkdirTemp("", "kbgen-run-")
		if err != nil {
			return &Error{Fault: FaultMachine, Err: fmt.Errorf("creating a work directory: %w", err)}
		}
		defer os.RemoveAll(dir)
		e.opts.WorkDir = dir
	}
	if err := os.MkdirAll(e.opts.WorkDir, 0o755); err != nil {
		return fmt.Errorf("creating work directory: %w", err)
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if e.opts.RequireGPU {
		// The probe runs beside the job rather than before it: a job on a
		// healthy machine pays nothing, and one on a broken machine is
		// stopped as soon as the probe says so.
		check := func() error {
			if _, found, why := e.probe.Wait(); !found {
				if why == "" {
					why = "neither nvidia-smi nor rocm-smi found a GPU"
				}
				return machineFault("no GPU visible: %s", why)
			}
			return nil
		}
		if e.probe.ready() {
			if err := check(); err != nil {
				return err
			}
		} else {
			go func() {
				if err := check(); err != nil {
					cancel(err)
				}
			}()
		}
	}
	if e.cfg.Mode == payload.ModeProfile {
		// Kernelbot picks the profiler from the runtime; find out before
		// anything runs rather than after a warm-up.
		if info, _, _ := e.probe.Wait(); info.Runtime != "CUDA" && info.Runtime != "ROCm" {
			return machineFault("profile mode needs a CUDA or ROCm GPU runtime; this machine has none")
		}
	}
	err := e.modes(ctx)
	if cause := context.Cause(ctx); cause != nil && FaultOf(cause) == FaultMachine {
		return cause
	}
	return err
}

// modes is Kernelbot's run_evaluation: which runs, under which keys, and
// the gating of leaderboard and private.
func (e *evaluation) modes(ctx context.Context) error {
	tests, benchmarks := caseText(e.cfg.Tests), caseText(e.cfg.Benchmarks)
	switch {
	case e.cfg.Mode == payload.ModeProfile:
		for i, line := range strings.Split(strings.TrimSuffix(benchmarks, "\n"), "\n") {
			if err := e.one(ctx, fmt.Sprintf("profile.%d", i), payload.ModeProfile, casesFor(payload.ModeProfile, tests, line, e.cfg.Ranking())); err != nil {
				return err
			}
		}
	case e.cfg.Mode.Ranked():
		for _, m := range e.cfg.RunModes() {
			if err := e.one(ctx, string(m), m, casesFor(m, tests, benchmarks, e.cfg.Ranking())); err != nil {
				return err
			}
			if r := e.runs[string(m)].Run; r == nil || !r.Passed {
				return nil
			}
		}
	default:
		m := e.cfg.Mode
		return e.one(ctx, string(m), m, casesFor(m, tests, benchmarks, e.cfg.Ranking()))
	}
	return nil
}

// one performs a single evaluation run and records it under key.
func (e *evaluation) one(ctx context.Context, key string, mode payload.Mode, cases string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	keyDir, err := os.MkdirTemp(e.opts.WorkDir, key+"-")
	if err != nil {
		return fmt.Errorf("creating run directory: %w", err)
	}
	if !e.opts.Keep {
		defer removeAll(keyDir)
	}
	e.logf("%s: start", key)
	start := time.Now()
	var res payload.EvalResult
	if e.cfg.Lang == payload.LangCUDA {
		res, err = e.cuda(ctx, keyDir, mode, cases)
	} else {
		res, err = e.python(ctx, keyDir, mode, cases)
	}
	if err != nil {
		return err
	}
	res.Start, res.End = payload.PyTime{Time: start}, payload.PyTime{Time: time.Now()}
	e.runs[key] = res
	if res.Run == nil {
		e.logf("%s: %s", key, Verdict(res))
	} else {
		e.logf("%s: %s (exit code %d)", key, Verdict(res), res.Run.ExitCode)
		if err := e.runtimeFault(ctx, mode, res.Run); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// timeout is the mode's timeout, capped by EvalOptions.MaxTimeout.
func (e *evaluation) timeout(mode payload.Mode) time.Duration {
	t := e.cfg.ModeTimeout(mode)
	if e.opts.MaxTimeout > 0 && t > e.opts.MaxTimeout {
		t = e.opts.MaxTimeout
	}
	return t
}

func (e *evaluation) compileTimeout() time.Duration {
	if e.opts.CompileTimeout > 0 {
		return e.opts.CompileTimeout
	}
	return CompileTimeout
}

// baseEnv is the submission's environment without the per-run POPCORN_*
// variables.
func (e *evaluation) baseEnv(extra map[string]string) []string {
	return SubmissionEnv(e.opts.Environ, extra)
}

// runEnv adds what run_program sets: POPCORN_SEED and POPCORN_GPUS.
func (e *evaluation) runEnv(seed *int64, extra map[string]string) []string {
	m := map[string]string{}
	for k, v := range extra {
		m[k] = v
	}
	if seed != nil {
		m["POPCORN_SEED"] = strconv.FormatInt(*seed, 10)
	}
	if e.cfg.MultiGPU {
		info, _, _ := e.probe.Wait()
		m["POPCORN_GPUS"] = strconv.Itoa(info.DeviceCount)
	}
	return e.baseEnv(m)
}

// writeCases writes the cases file next to (not inside) the run directory,
// read-only, and returns its absolute path.
func writeCases(keyDir, cases string) (string, error) {
	f, err := os.CreateTemp(keyDir, "cases-*.txt")
	if err != nil {
		return "", fmt.Errorf("writing cases file: %w", err)
	}
	_, err = f.WriteString(cases)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("writing cases file: %w", err)
	}
	_ = os.Chmod(f.Name(), 0o444)
	return filepath.Abs(f.Name())
}

// toRunResult is the RunResult Kernelbot's run_program builds from an
// outcome, plus kbgen's verdict rules: passed needs a clean exit, a single
// consistent `check`, and harness files that did not change.
func toRunResult(args []string, o *outcome, timeout time.Duration, tampered []string) *payload.RunResult {
	r := &payload.RunResult{
		Command: shellquote.Join(args),
		Stdout:  o.Stdout,
		Stderr:  o.Stderr,
		Result:  map[string]string{},
	}
	if o.TimedOut {
		r.ExitCode = ExitTimeout
		r.Duration = timeout.Seconds()
		return r
	}
	r.ExitCode = o.ExitCode
	r.Duration = o.Duration.Seconds()
	r.Success = o.ExitCode == ExitSuccess || o.ExitCode == ExitValidateFail
	result, conflicting := parseVerdict(o.Verdict)
	r.Result = result
	r.Passed = result["check"] == "pass" && r.Success && !conflicting && len(tampered) == 0
	var notes []string
	if conflicting {
		notes = append(notes, "kbgen: the verdict pipe received conflicting `check` lines; the run counts as failed")
	}
	if len(tampered) > 0 {
		notes = append(notes, "kbgen: harness files changed during the run ("+joinProblems(tampered)+"); the run counts as failed")
	}
	if result["check"] == "pass" && !r.Success {
		notes = append(notes, fmt.Sprintf("kbgen: `check: pass` ignored: the program exited with code %d", o.ExitCode))
	}
	if len(notes) > 0 {
		if r.Stderr != "" && !strings.HasSuffix(r.Stderr, "\n") {
			r.Stderr += "\n"
		}
		r.Stderr += strings.Join(notes, "\n") + "\n"
	}
	return r
}

// deviceFailures are what a GPU runtime prints when the machine, not the
// kernel, is broken. A submission can print them too, so they are
// believed only where a retry re-rolls nothing: see runtimeFault.
var deviceFailures = []string{
	"no CUDA-capable device is detected",
	"cudaErrorNoDevice",
	"CUDA_ERROR_NO_DEVICE",
	"CUDA driver version is insufficient",
	"cudaErrorInsufficientDriver",
	"cudaErrorInitializationError",
	"CUDA_ERROR_NOT_INITIALIZED",
	"No CUDA GPUs are available",
	"hipErrorNoDevice",
	"No HIP GPUs are available",
	"hipErrorInsufficientDriver",
}

// runtimeFault reports a machine fault (exit 75, retried elsewhere) when
// the test run died the way a broken GPU makes programs die and the GPU
// does not answer the runner either. Only the test run: it comes first
// and is untimed. In a timed run (benchmark, leaderboard, private,
// profile) the submission may already have seen its numbers, and the
// text is its own claim about the GPU, so it is the run's failure, never
// a retry (issue 20: a faked GPU fault re-rolled a leaderboard run up to
// three times). Even in the test run the text is the program's word: it
// can time itself or look at the machine there and print it to shop for
// another (issue 25), so the runner asks the GPU itself once the program
// is gone (gpuAnswers), and a GPU that answers makes the text the run's
// own failure.
func (e *evaluation) runtimeFault(ctx context.Context, mode payload.Mode, r *payload.RunResult) error {
	claim := deviceFailure(mode, r)
	if claim == "" || ctx.Err() != nil {
		return nil
	}
	n, how, err := e.gpuAnswers(ctx)
	if ctx.Err() != nil {
		return nil // a cancel during the probe is a cancel, not evidence
	}
	if err == nil {
		addNote(r, fmt.Sprintf("kbgen: the run printed %q, but the GPU answers the runner (%s lists %d): the run's own failure, not the machine's", claim, how, n))
		e.logf("the run printed %q; %s lists %d GPU(s): the run's failure", claim, how, n)
		return nil
	}
	return machineFault("the GPU runtime failed on this machine (%q, exit code %d), and the runner's own probe agrees: %v", claim, r.ExitCode, err)
}

// deviceFailure is the device failure a failed test run printed, or "".
func deviceFailure(mode payload.Mode, r *payload.RunResult) string {
	if mode != payload.ModeTest || r.Success || r.ExitCode == ExitTimeout {
		return ""
	}
	for _, s := range deviceFailures {
		if strings.Contains(r.Stderr, s) {
			return s
		}
	}
	return ""
}

// gpuAnswers asks the GPU, on the runner's own behalf and after the
// program and everything it started are gone, how many devices answer:
// through EvalOptions.GPUCount (kbgen-nvml) first, else the tools the
// system probe asks. It says which answered, or why none did.
func (e *evaluation) gpuAnswers(ctx context.Context) (int, string, error) {
	var helperErr error
	if e.opts.GPUCount != nil {
		n, err := e.opts.GPUCount()
		if err == nil && n > 0 {
			return n, "kbgen-nvml", nil
		}
		helperErr = cmp.Or(err, errors.New("kbgen-nvml lists no GPU"))
	}
	g := probeGPUs(ctx, e.baseEnv(nil))
	if g.count > 0 {
		return g.count, map[string]string{"CUDA": "nvidia-smi", "ROCm": "rocm-smi"}[g.runtime], nil
	}
	why := cmp.Or(g.err, "neither nvidia-smi nor rocm-smi lists a GPU")
	if helperErr != nil {
		why = helperErr.Error() + "; " + why
	}
	return 0, "", errors.New(why)
}

// addNote appends one of kbgen's lines to a run's stderr.
func addNote(r *payload.RunResult, note string) {
	if r.Stderr != "" && !strings.HasSuffix(r.Stderr, "\n") {
		r.Stderr += "\n"
	}
	r.Stderr += note + "\n"
}
