package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/shellquote"
	"github.com/gpu-mode/kbgen/payload"
)

// CUDAFlags is Kernelbot's CUDA_FLAGS, the nvcc flags of every cu job.
var CUDAFlags = []string{
	"--std=c++20",
	"-DNDEBUG",
	"-Xcompiler=-Wno-psabi",
	"-Xcompiler=-fno-strict-aliasing",
	"--expt-extended-lambda",
	"--expt-relaxed-constexpr",
	"-forward-unknown-to-host-compiler",
	"-O3",
	"-Xnvlink=--verbose",
	"-Xptxas=--verbose",
	"-Xptxas=--warn-on-spills",
}

// NvccArgs is the nvcc command line Kernelbot's compile_cuda_script builds
// (after the nvcc path): flags, include dirs, libraries, defines, then
// kbgen's compile_flags, the files, the arch and the output. Files are in
// name order, since the job's map has none.
func NvccArgs(cfg *payload.Config, files []string) []string {
	args := append([]string(nil), CUDAFlags...)
	for _, d := range cfg.IncludeDirs {
		args = append(args, "-I"+d)
	}
	for _, l := range cfg.Libraries {
		args = append(args, "-l"+l)
	}
	for _, name := range sortedKeys(cfg.Defines) {
		if v := cfg.Defines[name]; v.IsNull() {
			args = append(args, "-D"+name)
		} else {
			args = append(args, "-D"+name+"="+v.String())
		}
	}
	args = append(args, cfg.CompileFlags...)
	args = append(args, files...)
	if cfg.Arch.IsNull() {
		args = append(args, "-arch=native")
	} else {
		a := cfg.Arch.String()
		args = append(args, "-gencode=arch=compute_"+a+",code=sm_"+a)
	}
	return append(args, "-o", "eval.out")
}

// cuda is Kernelbot's run_cuda_script for one mode: compile with nvcc,
// remove every source and header, then run ./eval.out.
func (e *evaluation) cuda(ctx context.Context, keyDir string, mode payload.Mode, cases string) (payload.EvalResult, error) {
	var res payload.EvalResult
	dir := filepath.Join(keyDir, "build")
	if err := os.Mkdir(dir, 0o755); err != nil {
		return res, fmt.Errorf("creating build directory: %w", err)
	}
	for _, d := range e.cfg.IncludeDirs {
		p := d
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		// Checked before writing, as Kernelbot checks before compiling;
		// relative directories may name one of the job's own.
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return res, &payload.Error{Kind: payload.KindInvalidField, Field: "include_dirs", Msg: fmt.Sprintf("`%s` is not a directory", d)}
		}
	}
	all := map[string]string{}
	for k, v := range e.cfg.Sources {
		all[k] = v
	}
	for k, v := range e.cfg.Headers {
		all[k] = v
	}
	if err := writeFiles(dir, all, 0o644); err != nil {
		return res, err
	}
	for _, d := range e.cfg.IncludeDirs {
		p := d
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if _, err := os.Stat(p); err != nil {
			return res, &payload.Error{Kind: payload.KindInvalidField, Field: "include_dirs", Msg: fmt.Sprintf("directory `%s` does not exist", d)}
		}
	}
	res.Compilation = e.compile(ctx, dir)
	// Kernelbot removes the sources before user code runs so the harness
	// and reference cannot be read from disk; the headers go too.
	for name := range all {
		_ = os.Remove(filepath.Join(dir, filepath.FromSlash(name)))
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if !res.Compilation.Success {
		return res, nil
	}
	casesPath, err := writeCases(keyDir, cases)
	if err != nil {
		return res, err
	}
	args := []string{"./eval.out", string(mode), casesPath}
	res.Run, res.Profile, err = e.harness(ctx, keyDir, dir, args, mode, func() []string { return nil })
	return res, err
}

// compile runs nvcc as compile_cuda_script does. A missing nvcc is a
// result (nvcc_found false), not a runner failure, as in Kernelbot.
func (e *evaluation) compile(ctx context.Context, dir string) *payload.CompileResult {
	env := e.baseEnv(nil)
	nvcc, err := lookPathIn("nvcc", env)
	if err != nil {
		return &payload.CompileResult{NvccFound: false, Success: false, Command: "which nvcc", ExitCode: 1}
	}
	version := ""
	if o, err := (program{Args: []string{nvcc, "--version"}, Dir: dir, Env: env, Timeout: 30 * time.Second}).run(ctx); err == nil && o.ExitCode == 0 {
		version = o.Stdout
	} else {
		r := &payload.CompileResult{NvccFound: false, Command: "nvcc --version", ExitCode: 1}
		if err == nil {
			r.Stdout, r.Stderr, r.ExitCode = o.Stdout, o.Stderr, o.ExitCode
		}
		return r
	}
	files := sortedKeys(e.cfg.Sources)
	args := append([]string{nvcc}, NvccArgs(e.cfg, files)...)
	e.logf("compile: nvcc (%d files)", len(files))
	// The compiler gets the submission's environment: a source can
	// #include any readable file, /proc/self/environ included.
	o, err := program{Args: args, Dir: dir, Env: env, Timeout: e.compileTimeout()}.run(ctx)
	r := &payload.CompileResult{NvccFound: true, NvccVersion: version, Command: shellquote.Join(args)}
	if err != nil {
		r.Stderr, r.ExitCode = err.Error(), 1
		return r
	}
	r.Stdout, r.Stderr, r.ExitCode = o.Stdout, o.Stderr, o.ExitCode
	if o.TimedOut {
		r.ExitCode = ExitTimeout
		r.Stderr += fmt.Sprintf("\nkbgen: nvcc did not finish within %s\n", e.compileTimeout())
	}
	r.Success = !o.TimedOut && o.ExitCode == 0
	return r
}

// lookPathIn finds file in the PATH of env (the submission's), falling
// back to the runner's own.
func lookPathIn(file string, env []string) (string, error) {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			for _, d := range filepath.SplitList(v) {
				if d == "" {
					continue
				}
				p := filepath.Join(d, file)
				if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
					return p, nil
				}
			}
			return "", exec.ErrNotFound
		}
	}
	return exec.LookPath(file)
}
