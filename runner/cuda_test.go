package runner

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/payload"
)

// standIns puts testdata/bin (stand-in nvcc, ncu, nvidia-smi,
// buildkite-agent) first on the PATH of the returned environment.
func standIns(t *testing.T, extra ...string) []string {
	t.Helper()
	bin, err := filepath.Abs("testdata/bin")
	if err != nil {
		t.Fatal(err)
	}
	env := []string{"PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PATH=") {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

func cuJob(mode payload.Mode) *payload.Config {
	return &payload.Config{
		Lang: payload.LangCUDA, Mode: mode,
		Sources: map[string]string{"eval.cu": "// harness\n", "submission.cu": "// kernel\n"},
		Headers: map[string]string{"reference.cuh": "// reference\n"},
		Tests:   []payload.Case{{{Key: "size", Value: payload.IntScalar(8)}, {Key: "seed", Value: payload.IntScalar(1)}}},
		Benchmarks: []payload.Case{
			{{Key: "size", Value: payload.IntScalar(16)}},
			{{Key: "size", Value: payload.IntScalar(32)}},
		},
		Arch:         payload.StringScalar("90a"),
		Defines:      map[string]payload.Scalar{"FAST": {}, "N": payload.IntScalar(4)},
		IncludeDirs:  []string{"/usr/include"},
		Libraries:    []string{"cublas"},
		CompileFlags: []string{"-lineinfo"},
	}
}

func TestCUDACompileAndRun(t *testing.T) {
	argvLog := filepath.Join(t.TempDir(), "argv")
	res, err := evaluate(t, cuJob(payload.ModeTest), func(o *EvalOptions) { o.Environ = standIns(t, "NVCC_ARGV_LOG="+argvLog) })
	if err != nil {
		t.Fatal(err)
	}
	run := res.Runs["test"]
	c := run.Compilation
	if c == nil || !c.Success || !c.NvccFound || !strings.Contains(c.NvccVersion, "release 12.4") || !strings.Contains(c.Stdout, "ptxas info") {
		t.Fatalf("compilation %+v", c)
	}
	argv, _ := os.ReadFile(argvLog)
	want := append(append([]string(nil), CUDAFlags...),
		"-I/usr/include", "-lcublas", "-DFAST", "-DN=4", "-lineinfo", "eval.cu", "submission.cu",
		"-gencode=arch=compute_90a,code=sm_90a", "-o", "eval.out")
	if got := strings.Split(strings.TrimSpace(string(argv)), "\n"); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("nvcc argv\n got %v\nwant %v", got, want)
	}
	if !strings.HasSuffix(c.Command, " "+strings.Join(want, " ")) || !strings.HasPrefix(c.Command, "/") {
		t.Errorf("command %q", c.Command)
	}
	r := run.Run
	if r == nil || !r.Passed || r.Result["sources"] != "gone" || r.Result["mode"] != "test" || r.Result["cases"] != "size: 8; seed: 1|" {
		t.Fatalf("run %+v", r)
	}
	if !strings.HasPrefix(r.Command, "./eval.out test /") || r.Stdout != "eval.out ran in mode test\n" {
		t.Errorf("run command %q stdout %q", r.Command, r.Stdout)
	}
}

func TestCUDANativeArchAndFailures(t *testing.T) {
	if got := NvccArgs(&payload.Config{}, []string{"a.cu"}); strings.Join(got[len(got)-4:], " ") != "a.cu -arch=native -o eval.out" {
		t.Errorf("native arch: %v", got)
	}
	if got := NvccArgs(&payload.Config{Arch: payload.IntScalar(80)}, nil); got[len(got)-3] != "-gencode=arch=compute_80,code=sm_80" {
		t.Errorf("int arch: %v", got)
	}

	t.Run("compile error", func(t *testing.T) {
		cfg := cuJob(payload.ModeLeaderboard)
		cfg.Sources["submission.cu"] = "#error nope\n"
		res, err := evaluate(t, cfg, func(o *EvalOptions) { o.Environ = standIns(t) })
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Runs) != 1 {
			t.Fatalf("runs %v: a failed compile ends a ranked run", runOrder(res.Runs))
		}
		c := res.Runs["test"].Compilation
		if c.Success || c.ExitCode != 2 || !strings.Contains(c.Stderr, "compilation failed on purpose") || res.Runs["test"].Run != nil {
			t.Errorf("compilation %+v run %+v", c, res.Runs["test"].Run)
		}
		if Verdict(res.Runs["test"]) != "compile failed" {
			t.Errorf("verdict %q", Verdict(res.Runs["test"]))
		}
	})
	t.Run("no nvcc", func(t *testing.T) {
		res, err := evaluate(t, cuJob(payload.ModeTest), func(o *EvalOptions) { o.Environ = []string{"PATH=" + t.TempDir()} })
		if err != nil || !res.Success {
			t.Fatalf("a missing nvcc is a result, not a runner failure: %v", err)
		}
		c := res.Runs["test"].Compilation
		if c.NvccFound || c.Success || c.Command != "which nvcc" || c.ExitCode != 1 {
			t.Errorf("compilation %+v", c)
		}
	})
	t.Run("missing include dir", func(t *testing.T) {
		cfg := cuJob(payload.ModeTest)
		cfg.IncludeDirs = []string{"/nonexistent/ThunderKittens/include"}
		_, err := evaluate(t, cfg, func(o *EvalOptions) { o.Environ = standIns(t) })
		var je *payload.Error
		if FaultOf(err) != FaultJob || !errors.As(err, &je) || je.Field != "include_dirs" {
			t.Errorf("fault %v: %v", FaultOf(err), err)
		}
	})
}

func TestProfileWithNcu(t *testing.T) {
	argvLog := filepath.Join(t.TempDir(), "ncu-argv")
	cuda := payload.SystemInfo{GPU: "NVIDIA H100", DeviceCount: 1, Runtime: "CUDA"}
	res, err := evaluate(t, cuJob(payload.ModeProfile), func(o *EvalOptions) {
		o.Environ = standIns(t, "NCU_ARGV_LOG="+argvLog)
		o.Probe = FixedProbe(cuda, true)
	})
	if err != nil {
		t.Fatal(err)
	}
	if keys := runOrder(res.Runs); strings.Join(keys, ",") != "profile.0,profile.1" {
		t.Fatalf("profile keys %v: one run per benchmark", keys)
	}
	for i, want := range []string{"size: 16", "size: 32"} {
		r := res.Runs["profile."+strconv.Itoa(i)]
		if r.Run == nil || !r.Run.Passed || r.Run.Result["cases"] != want+"|" && r.Run.Result["cases"] != want {
			t.Fatalf("profile.%d: %+v", i, r.Run)
		}
		if r.Run.Result["ncu"] != "1" {
			t.Errorf("POPCORN_NCU not set: %v", r.Run.Result)
		}
		if !strings.HasPrefix(r.Run.Command, "ncu --set full --nvtx --nvtx-include custom_kernel/ --import-source 1 -c 10 -o /") || !strings.Contains(r.Run.Command, "/profile_data/profile.ncu-rep -- ./eval.out profile /") {
			t.Errorf("command %q", r.Run.Command)
		}
		report, _ := base64.StdEncoding.DecodeString(r.Run.Result["benchmark.0.report"])
		if !strings.Contains(string(report), "DRAM Throughput") || strings.Contains(string(report), "ignored line") {
			t.Errorf("filtered report %q", report)
		}
		if r.Profile == nil || r.Profile.Profiler != "Nsight-Compute" || r.Profile.DownloadURL != nil {
			t.Fatalf("profile %+v", r.Profile)
		}
		names := zipNames(t, r.Profile.Trace)
		if strings.Join(names, ",") != "profile.ncu-rep" {
			t.Errorf("trace holds %v", names)
		}
	}
}

func TestProfileOfACrashingRunHasNoTrace(t *testing.T) {
	cuda := payload.SystemInfo{GPU: "NVIDIA H100", DeviceCount: 1, Runtime: "CUDA"}
	cfg := cuJob(payload.ModeProfile)
	cfg.Benchmarks = cfg.Benchmarks[:1]
	res, err := evaluate(t, cfg, func(o *EvalOptions) {
		o.Environ = standIns(t, "POPCORN_TEST_EXIT=3")
		o.Probe = FixedProbe(cuda, true)
	})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs["profile.0"]
	if r.Run == nil || r.Run.Success || r.Run.ExitCode != 3 || r.Profile != nil {
		t.Fatalf("run %+v profile %+v", r.Run, r.Profile)
	}
	// As in Kernelbot, the ncu report is attached even to a failed run.
	if r.Run.Result["benchmark.0.report"] == "" {
		t.Error("no ncu report")
	}
}

func TestProfileWithRocprof(t *testing.T) {
	bin := t.TempDir()
	script := `#!/bin/sh
out=""
while [ $# -gt 0 ]; do
  case "$1" in
    -d) out="$2"; shift 2 ;;
    --) shift; break ;;
    *) shift ;;
  esac
done
echo trace-a > "$out/11_results.pftrace"
echo trace-b > "$out/12_results.pftrace"
echo obj > _code_object1.o
exec "$@"
`
	if err := os.WriteFile(filepath.Join(bin, "rocprofv3"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	env := standIns(t)
	env[0] = "PATH=" + bin + ":" + strings.TrimPrefix(env[0], "PATH=")
	rocm := payload.SystemInfo{GPU: "AMD Instinct MI300X", DeviceCount: 1, Runtime: "ROCm"}
	cfg := cuJob(payload.ModeProfile)
	cfg.Benchmarks = cfg.Benchmarks[:1]
	res, err := evaluate(t, cfg, func(o *EvalOptions) { o.Environ = env; o.Probe = FixedProbe(rocm, true) })
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs["profile.0"]
	if r.Profile == nil || r.Profile.Profiler != "rocPROF" || !strings.HasPrefix(r.Run.Command, "rocprofv3 --log-level fatal --hip-trace") {
		t.Fatalf("run %+v profile %+v", r.Run, r.Profile)
	}
	if names := zipNames(t, r.Profile.Trace); strings.Join(names, ",") != "_code_object1.o,combined.pftrace" {
		t.Errorf("trace holds %v", names)
	}
}

func TestCUDAUnrunnableBinaryIsAResult(t *testing.T) {
	bin := t.TempDir()
	// An nvcc that "succeeds" without writing eval.out.
	if err := os.WriteFile(filepath.Join(bin, "nvcc"), []byte("#!/bin/sh\n[ \"$1\" = --version ] && echo v1\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := evaluate(t, cuJob(payload.ModeTest), func(o *EvalOptions) { o.Environ = []string{"PATH=" + bin + ":/usr/bin:/bin"} })
	if err != nil {
		t.Fatalf("a missing eval.out is the job's result, not a runner failure: %v", err)
	}
	r := res.Runs["test"].Run
	if r == nil || r.Success || r.Passed || r.ExitCode != 126 || !strings.Contains(r.Stderr, "could not start ./eval.out") {
		t.Errorf("run %+v", r)
	}
}
