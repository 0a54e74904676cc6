package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpu-mode/kbgen/internal/shellquote"
	"github.com/gpu-mode/kbgen/payload"
)

// warmupSeed is the POPCORN_SEED Kernelbot gives the warm-up run.
var warmupSeed int64 = 1

// python is Kernelbot's run_pytorch_script for one mode, hardened: the
// warm-up runs in a directory of its own that is thrown away, and the
// harness runs from a fresh, read-only copy of the sources written after
// every warm-up process is dead, verified before and after the run.
func (e *evaluation) python(ctx context.Context, keyDir string, mode payload.Mode, cases string) (payload.EvalResult, error) {
	var res payload.EvalResult
	py := "python3"
	warmDir := filepath.Join(keyDir, "warmup")
	if err := os.Mkdir(warmDir, 0o755); err != nil {
		return res, fmt.Errorf("creating warm-up directory: %w", err)
	}
	if err := writeFiles(warmDir, e.cfg.Sources, 0o644); err != nil {
		return res, err
	}
	// "compile" step: run the submission once to fill load_inline's
	// compile cache, as Kernelbot does; its verdict is ignored.
	warmArgs := []string{py, "submission.py"}
	e.logf("%s: warm-up %s", mode, shellquote.Join(warmArgs))
	o, err := program{Args: warmArgs, Dir: warmDir, Env: e.runEnv(&warmupSeed, nil), Timeout: e.compileTimeout(), Verdict: true}.run(ctx)
	if err != nil {
		if isNotFound(err) {
			return res, machineFault("%s not found on PATH: py jobs need a Python 3 interpreter", py)
		}
		return res, fmt.Errorf("starting the warm-up run: %w", err)
	}
	if strings.Contains(o.Stdout, "-DTORCH_EXTENSION_NAME") && !o.TimedOut {
		res.Compilation = &payload.CompileResult{
			NvccFound: true, Success: true, Command: shellquote.Join(warmArgs),
			Stdout: o.Stdout, Stderr: o.Stderr, ExitCode: o.ExitCode,
		}
	}
	if !e.opts.Keep {
		removeAll(warmDir)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}

	runDir, err := os.MkdirTemp(keyDir, "run-")
	if err != nil {
		return res, fmt.Errorf("creating run directory: %w", err)
	}
	if err := writeFiles(runDir, e.cfg.Sources, 0o444); err != nil {
		return res, err
	}
	stamps := stampFiles(runDir, e.cfg.Sources)
	if problems := verifyFiles(runDir, e.cfg.Sources, true, nil); len(problems) > 0 {
		// Nothing of the job's runs between writing and here; this is a
		// machine or a leftover process the sweep missed.
		return res, fmt.Errorf("run directory changed before the harness started: %s", joinProblems(problems))
	}
	casesPath, err := writeCases(keyDir, cases)
	if err != nil {
		return res, err
	}
	args := []string{py, e.cfg.Main, string(mode), casesPath}
	res.Run, res.Profile, err = e.harness(ctx, keyDir, runDir, args, mode, func() []string {
		return verifyFiles(runDir, e.cfg.Sources, false, stamps)
	})
	return res, err
}

// harness runs the evaluated program (python3 <main> or ./eval.out) with
// the verdict pipe, under the profiler in profile mode.
func (e *evaluation) harness(ctx context.Context, keyDir, dir string, args []string, mode payload.Mode, verify func() []string) (*payload.RunResult, *payload.ProfileResult, error) {
	timeout := e.timeout(mode)
	if mode == payload.ModeProfile {
		return e.profile(ctx, keyDir, dir, args, timeout, verify)
	}
	e.logf("%s: %s %s (timeout %s)", mode, args[0], strings.Join(args[1:len(args)-1], " "), timeout)
	timed := e.opts.Noise != nil && (mode == payload.ModeBenchmark || mode == payload.ModeLeaderboard)
	if timed {
		e.opts.Noise.Begin(string(mode))
	}
	o, err := program{Args: args, Dir: dir, Env: e.runEnv(e.cfg.Seed, nil), Timeout: timeout, Verdict: true}.run(ctx)
	if timed {
		e.opts.Noise.End(string(mode))
	}
	if err != nil {
		return startFailure(args, err)
	}
	return toRunResult(args, o, timeout, verify()), nil, nil
}

// startFailure handles a harness that could not be started. A missing
// interpreter (python3, a profiler) is the image's fault; a program the
// job built (./eval.out) that cannot be executed is the job's result,
// reported the way a shell reports it (exit code 126).
func startFailure(args []string, err error) (*payload.RunResult, *payload.ProfileResult, error) {
	if !strings.Contains(args[0], "/") {
		if isNotFound(err) {
			return nil, nil, machineFault("%s not found: the image lacks it", args[0])
		}
		return nil, nil, fmt.Errorf("starting %s: %w", args[0], err)
	}
	return &payload.RunResult{
		Command:  shellquote.Join(args),
		Stderr:   fmt.Sprintf("kbgen: could not start %s: %v\n", args[0], err),
		ExitCode: 126,
		Result:   map[string]string{},
	}, nil, nil
}
