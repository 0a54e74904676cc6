package runner

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// ncuArgs is Kernelbot's profile_program_ncu wrapper.
func ncuArgs(outDir string, call []string) []string {
	return append([]string{
		"ncu", "--set", "full", "--nvtx", "--nvtx-include", "custom_kernel/",
		"--import-source", "1", "-c", "10",
		"-o", filepath.Join(outDir, "profile.ncu-rep"), "--",
	}, call...)
}

// rocprofArgs is Kernelbot's profile_program_roc wrapper (the duplicated
// --hip-trace is Kernelbot's).
func rocprofArgs(outDir string, call []string) []string {
	return append([]string{
		"rocprofv3", "--log-level", "fatal", "--hip-trace", "--kernel-trace",
		"--rccl-trace", "--marker-trace", "--hip-trace", "--memory-copy-trace",
		"--scratch-memory-trace", "--output-format", "pftrace", "csv",
		"-d", outDir, "-o", "%pid%", "--",
	}, call...)
}

// ncuTables are the tables of the ncu report shown inline.
var ncuTables = []string{"GPU Throughput", "Pipe Utilization (% of active cycles)", "Warp State (All Cycles)"}

// profile runs the harness under the GPU runtime's profiler and packs the
// profiler's directory into ProfileResult.trace, as Kernelbot's
// profile_program does.
func (e *evaluation) profile(ctx context.Context, keyDir, dir string, call []string, timeout time.Duration, verify func() []string) (*payload.RunResult, *payload.ProfileResult, error) {
	info, _, _ := e.probe.Wait()
	outDir := filepath.Join(keyDir, contract.ProfileDir)
	if err := os.Mkdir(outDir, 0o755); err != nil {
		return nil, nil, fmt.Errorf("creating profile directory: %w", err)
	}
	var args []string
	extra := map[string]string{}
	profiler := ""
	switch info.Runtime {
	case "CUDA":
		if e.cfg.MultiGPU {
			return nil, nil, &payload.Error{Kind: payload.KindInvalidField, Field: "multi_gpu", Msg: "multi-GPU profiling is not supported with ncu"}
		}
		args, profiler = ncuArgs(outDir, call), "Nsight-Compute"
		extra["POPCORN_NCU"] = "1"
	case "ROCm":
		args, profiler = rocprofArgs(outDir, call), "rocPROF"
		extra["GPU_DUMP_CODE_OBJECT"] = "1"
	default:
		return nil, nil, machineFault("profile mode needs a CUDA or ROCm GPU runtime; this machine has none")
	}
	e.logf("profile: %s (timeout %s)", profiler, timeout)
	o, err := program{Args: args, Dir: dir, Env: e.runEnv(e.cfg.Seed, extra), Timeout: timeout, Verdict: true}.run(ctx)
	if err != nil {
		return startFailure(args, err)
	}
	run := toRunResult(args, o, timeout, verify())
	if profiler == "Nsight-Compute" {
		imp := []string{"ncu", "--import", filepath.Join(outDir, "profile.ncu-rep"), "--print-details", "body"}
		if ro, err := (program{Args: imp, Dir: dir, Env: e.baseEnv(nil), Timeout: 60 * time.Second}).run(ctx); err == nil && ro.ExitCode == 0 && !ro.TimedOut {
			report := filterNcuReport(ro.Stdout, ncuTables)
			run.Result["benchmark.0.report"] = base64.StdEncoding.EncodeToString([]byte(report))
		}
	}
	if !run.Success {
		return run, nil, nil
	}
	if profiler == "rocPROF" {
		if err := combineRocTraces(outDir, dir); err != nil {
			return nil, nil, err
		}
	}
	trace, err := zipDir(outDir)
	if err != nil {
		return nil, nil, fmt.Errorf("packing the profile: %w", err)
	}
	return run, &payload.ProfileResult{Profiler: profiler, Trace: base64.StdEncoding.EncodeToString(trace)}, nil
}

// combineRocTraces concatenates rocprofv3's per-process .pftrace files into
// combined.pftrace and moves the dumped code objects in, as Kernelbot does.
func combineRocTraces(outDir, cwd string) error {
	traces, _ := filepath.Glob(filepath.Join(outDir, "*.pftrace"))
	sort.Strings(traces)
	combined, err := os.Create(filepath.Join(outDir, "combined.pftrace"))
	if err != nil {
		return fmt.Errorf("combining traces: %w", err)
	}
	defer combined.Close()
	for _, t := range traces {
		f, err := os.Open(t)
		if err != nil {
			return fmt.Errorf("combining traces: %w", err)
		}
		_, err = io.Copy(combined, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("combining traces: %w", err)
		}
		_ = os.Remove(t)
	}
	objs, _ := filepath.Glob(filepath.Join(cwd, "_code_object*.o"))
	for _, o := range objs {
		_ = os.Rename(o, filepath.Join(outDir, filepath.Base(o)))
	}
	return nil
}

// zipDir is shutil.make_archive(..., "zip", dir): every file under dir,
// named relative to it. Symlinks are skipped: the profiled program could
// plant one pointing at a secret.
func zipDir(dir string) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		w, err := zw.Create(filepath.ToSlash(rel))
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(w, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// filterNcuReport is Kernelbot's _filter_ncu_report: the first two kernels'
// chosen tables from `ncu --print-details body`, short enough for a chat
// message.
func filterNcuReport(report string, tables []string) string {
	var b strings.Builder
	nKernels, length, collect := 0, 0, false
	for _, line := range splitLines(report) {
		if len(line) >= 3 && line[1] == ' ' && line[2] != ' ' {
			if nKernels != 0 {
				b.WriteString("\n")
			}
			nKernels++
			if nKernels == 3 {
				b.WriteString("\nAdditional kernel launches follow. Please check the .ncu-rep file for more details.\n")
			}
			b.WriteString(line + "\n")
		}
		if nKernels > 2 {
			continue
		}
		if i := strings.Index(line, "Table Name : "); i >= 0 {
			table := strings.TrimSpace(line[i+len("Table Name :"):])
			collect = false
			for _, t := range tables {
				if t == table {
					b.WriteString("\n")
					collect = true
				}
			}
		}
		if strings.TrimSpace(line) == "" {
			collect = false
		}
		if collect {
			b.WriteString(line + "\n")
			length++
			if length > 100 {
				b.WriteString("\n[...]\nReport has been truncated. Please check the .ncu-rep file for more details.\n")
				break
			}
		}
	}
	return b.String()
}
