package runner

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/payload"
)

// pyJob is a py job whose harness is evalPy and whose submission is
// submission (both Python source).
func pyJob(mode payload.Mode, evalPy, submission string) *payload.Config {
	cfg := &payload.Config{
		Lang: payload.LangPython, Mode: mode, Main: "eval.py",
		Sources: map[string]string{"eval.py": evalPy, "submission.py": submission},
		Tests:   []payload.Case{{{Key: "size", Value: payload.IntScalar(8)}}},
		Benchmarks: []payload.Case{
			{{Key: "size", Value: payload.IntScalar(16)}},
			{{Key: "size", Value: payload.IntScalar(32)}},
		},
		TestTimeout: 30, BenchmarkTimeout: 30, RankedTimeout: 30,
	}
	return cfg
}

// verdictPy writes the given verdict lines to POPCORN_FD and exits with code.
func verdictPy(code int, lines ...string) string {
	var b strings.Builder
	b.WriteString("import os, sys\nf = os.fdopen(int(os.environ['POPCORN_FD']), 'w')\n")
	for _, l := range lines {
		b.WriteString("f.write(" + pyQuote(l+"\n") + ")\n")
	}
	b.WriteString("f.close()\nsys.exit(" + strconv.Itoa(code) + ")\n")
	return b.String()
}

func pyQuote(s string) string { return jsonNumberString(s) }

func jsonNumberString(s string) string {
	r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	return `"` + r.Replace(s) + `"`
}

func TestModesAndGating(t *testing.T) {
	needPython(t)
	tests := []struct {
		example, submission string
		mode                payload.Mode
		keys                []string
		passed              bool
	}{
		{"vectoradd", "submission", payload.ModeTest, []string{"test"}, true},
		{"vectoradd", "submission", payload.ModeBenchmark, []string{"benchmark"}, true},
		{"vectoradd", "submission", payload.ModeLeaderboard, []string{"test", "benchmark", "leaderboard"}, true},
		{"identity", "submission", payload.ModePrivate, []string{"test", "benchmark", "leaderboard"}, true},
		{"vectoradd", "wrong", payload.ModeTest, []string{"test"}, false},
		// Gating: a failed test stops a ranked run before the benchmark.
		{"vectoradd", "wrong", payload.ModeLeaderboard, []string{"test"}, false},
		{"vectoradd", "crash", payload.ModeBenchmark, []string{"benchmark"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.example+"/"+tt.submission+"/"+string(tt.mode), func(t *testing.T) {
			res, err := evaluate(t, example(t, tt.example, tt.submission, tt.mode))
			if err != nil || !res.Success {
				t.Fatalf("runner failed: %v", err)
			}
			if got := runOrder(res.Runs); strings.Join(got, ",") != strings.Join(tt.keys, ",") {
				t.Fatalf("run keys %v, want %v", got, tt.keys)
			}
			for _, k := range tt.keys {
				r := res.Runs[k].Run
				if r == nil {
					t.Fatalf("%s: no run", k)
				}
				if r.Passed != tt.passed {
					t.Errorf("%s: passed=%v, want %v\nstdout %s\nstderr %s\nresult %v", k, r.Passed, tt.passed, r.Stdout, r.Stderr, r.Result)
				}
				if tt.passed && (r.ExitCode != 0 || !r.Success || r.Result["check"] != "pass") {
					t.Errorf("%s: exit %d success %v result %v", k, r.ExitCode, r.Success, r.Result)
				}
				if !tt.passed && r.ExitCode != ExitValidateFail {
					t.Errorf("%s: exit code %d, want 112", k, r.ExitCode)
				}
			}
		})
	}
}

func TestRankingLastRunsOnlyTheLastBenchmark(t *testing.T) {
	needPython(t)
	// The harness echoes its cases file into the verdict.
	evalPy := `import os, sys
cases = open(sys.argv[2]).read()
f = os.fdopen(int(os.environ['POPCORN_FD']), 'w')
f.write('cases: ' + cases.replace('\n', '|') + '\n')
f.write('mode: ' + sys.argv[1] + '\n')
f.write('seed: ' + os.environ.get('POPCORN_SEED', 'none') + '\n')
f.write('check: pass\n')
`
	for _, tc := range []struct {
		ranking payload.RankingBy
		mode    payload.Mode
		want    string
	}{
		{payload.RankingLast, payload.ModeBenchmark, "size: 32|"},
		{payload.RankingMean, payload.ModeBenchmark, "size: 16|size: 32|"},
		{payload.RankingGeom, payload.ModeTest, "size: 8|"},
	} {
		cfg := pyJob(tc.mode, evalPy, "")
		cfg.RankingBy = tc.ranking
		res, err := evaluate(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Runs[string(tc.mode)].Run
		if r.Result["cases"] != tc.want || r.Result["mode"] != string(tc.mode) || r.Result["seed"] != "none" {
			t.Errorf("%s/%s: result %v", tc.ranking, tc.mode, r.Result)
		}
	}
	seed := int64(987)
	cfg := pyJob(payload.ModePrivate, evalPy, "")
	cfg.Seed = &seed
	res, err := evaluate(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"test", "benchmark", "leaderboard"} {
		if got := res.Runs[k].Run.Result["seed"]; got != "987" {
			t.Errorf("%s: POPCORN_SEED %q, want 987", k, got)
		}
	}
}

func TestExitCodesAndVerdicts(t *testing.T) {
	needPython(t)
	tests := []struct {
		name             string
		evalPy           string
		success, passed  bool
		exit             int
		stderrHas        string
		resultCheckValue string
	}{
		{"pass", verdictPy(0, "check: pass", "a: b:c", "  spaced  :  v "), true, true, 0, "", "pass"},
		{"validate fail", verdictPy(112, "check: fail"), true, false, 112, "", "fail"},
		{"crash", "raise SystemExit(3)", false, false, 3, "", ""},
		{"exception", "raise ValueError('boom')", false, false, 1, "ValueError: boom", ""},
		{"signal", "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", false, false, -11, "", ""},
		{"pass but crashed", verdictPy(1, "check: pass"), false, false, 1, "`check: pass` ignored", "pass"},
		{"conflicting verdicts", verdictPy(0, "check: fail", "check: pass"), true, false, 0, "conflicting `check` lines", "pass"},
		{"no pipe use", "print('hi')", true, false, 0, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			res, err := evaluate(t, pyJob(payload.ModeTest, tt.evalPy, ""))
			if err != nil {
				t.Fatal(err)
			}
			r := res.Runs["test"].Run
			if r.Success != tt.success || r.Passed != tt.passed || r.ExitCode != tt.exit {
				t.Errorf("success=%v passed=%v exit=%d, want %v %v %d\nstderr: %s", r.Success, r.Passed, r.ExitCode, tt.success, tt.passed, tt.exit, r.Stderr)
			}
			if !strings.Contains(r.Stderr, tt.stderrHas) {
				t.Errorf("stderr %q lacks %q", r.Stderr, tt.stderrHas)
			}
			if r.Result["check"] != tt.resultCheckValue {
				t.Errorf("check=%q", r.Result["check"])
			}
			if tt.name == "pass" && (r.Result["a"] != "b:c" || r.Result["spaced"] != "v") {
				t.Errorf("verdict parsing: %v", r.Result)
			}
		})
	}
}

func TestOutputIsCutAndDecoded(t *testing.T) {
	needPython(t)
	evalPy := `import sys
for i in range(200000):
    print('line %d of a huge output' % i)
sys.stdout.flush()
sys.stderr.buffer.write(b'bad utf8: \xff\xfe end\r\nnext\n')
`
	res, err := evaluate(t, pyJob(payload.ModeTest, evalPy, ""))
	if err != nil {
		t.Fatal(err)
	}
	r := res.Runs["test"].Run
	if len(r.Stdout) > maxOutputChars || !strings.HasSuffix(r.Stdout, " lines omitted") {
		t.Errorf("stdout not cut: %d bytes, ends %q", len(r.Stdout), r.Stdout[max(0, len(r.Stdout)-40):])
	}
	if !strings.HasPrefix(r.Stdout, "line 0 of a huge output\n") {
		t.Errorf("stdout head lost: %q", r.Stdout[:40])
	}
	// 200000 lines plus the empty one after the last newline.
	kept := strings.Count(r.Stdout, "\n")
	if want := "[...] " + strconv.Itoa(200001-kept) + " lines omitted"; !strings.HasSuffix(r.Stdout, want) {
		t.Errorf("stdout ends %q, want %q", r.Stdout[len(r.Stdout)-40:], want)
	}
	if r.Stderr != "bad utf8: \uFFFD\uFFFD end\nnext\n" {
		t.Errorf("stderr %q", r.Stderr)
	}
}

func TestTimeoutKillsTheWholeTree(t *testing.T) {
	needPython(t)
	cfg := example(t, "vectoradd", "hang", payload.ModeTest)
	cfg.TestTimeout = 2
	start := time.Now()
	res, err := evaluate(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 40*time.Second {
		t.Errorf("took %s", took)
	}
	r := res.Runs["test"].Run
	if r.ExitCode != ExitTimeout || r.Success || r.Passed || r.Duration != 2 || len(r.Result) != 0 {
		t.Errorf("timeout result: %+v", r)
	}
	// evaluate() already asserted that no process survived.
}

func TestWarmupTimeoutIsNotFatal(t *testing.T) {
	needPython(t)
	cfg := pyJob(payload.ModeTest, verdictPy(0, "check: pass"), "import time\nif __name__ == '__main__':\n    time.sleep(60)\n")
	res, err := evaluate(t, cfg, func(o *EvalOptions) { o.CompileTimeout = time.Second })
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Runs["test"]; r.Compilation != nil || !r.Run.Passed {
		t.Errorf("warm-up timeout should be ignored: %+v %+v", r.Compilation, r.Run)
	}
}

func TestWarmupCompilationRecorded(t *testing.T) {
	needPython(t)
	sub := "if __name__ == '__main__':\n    print('c++ -DTORCH_EXTENSION_NAME=sub -O3')\n"
	res, err := evaluate(t, pyJob(payload.ModeTest, verdictPy(0, "check: pass"), sub))
	if err != nil {
		t.Fatal(err)
	}
	c := res.Runs["test"].Compilation
	if c == nil || !c.Success || !c.NvccFound || c.Command != "python3 submission.py" || !strings.Contains(c.Stdout, "TORCH_EXTENSION_NAME") {
		t.Errorf("compilation %+v", c)
	}
}

func TestBadJobs(t *testing.T) {
	noMain := pyJob(payload.ModeTest, "", "")
	noMain.Main = ""
	escape := pyJob(payload.ModeTest, "", "")
	escape.Sources["../outside.py"] = "x"
	abs := pyJob(payload.ModeTest, "", "")
	abs.Sources["/etc/evil"] = "x"
	for name, cfg := range map[string]*payload.Config{"missing main": noMain, "escaping name": escape, "absolute name": abs} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			res, err := evaluate(t, cfg, func(o *EvalOptions) { o.WorkDir = dir })
			if FaultOf(err) != FaultJob || res.Success || res.Error == "" || len(res.Runs) != 0 {
				t.Fatalf("fault %v, result %+v", FaultOf(err), res)
			}
			if _, err := os.Stat(dir + "/../outside.py"); err == nil {
				t.Error("a file was written outside the work dir")
			}
		})
	}
	// writeFiles checks names itself, whatever validated the job.
	if err := writeFiles(t.TempDir(), map[string]string{"a/../../x": ""}, 0o644); !payload.IsJobError(err) {
		t.Errorf("writeFiles accepted an escaping name: %v", err)
	}
}

func TestMachineFaults(t *testing.T) {
	needPython(t)
	t.Run("no GPU with require-gpu", func(t *testing.T) {
		res, err := evaluate(t, pyJob(payload.ModeTest, verdictPy(0, "check: pass"), ""), func(o *EvalOptions) { o.RequireGPU = true })
		if FaultOf(err) != FaultMachine || res.Success || !strings.Contains(res.Error, "no GPU visible") {
			t.Fatalf("fault %v err %v", FaultOf(err), err)
		}
	})
	t.Run("no GPU found while the job runs", func(t *testing.T) {
		// A probe still running when the job starts: the job is stopped
		// as soon as the probe reports no GPU.
		slow := &Probe{done: make(chan struct{}), info: testSystem}
		time.AfterFunc(500*time.Millisecond, func() { close(slow.done) })
		start := time.Now()
		res, err := evaluate(t, example(t, "vectoradd", "hang", payload.ModeTest), func(o *EvalOptions) {
			o.RequireGPU = true
			o.Probe = slow
		})
		if FaultOf(err) != FaultMachine || !strings.Contains(res.Error, "no GPU visible") {
			t.Fatalf("fault %v err %v", FaultOf(err), err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("took %s", took)
		}
	})
	t.Run("GPU present with require-gpu", func(t *testing.T) {
		_, err := evaluate(t, pyJob(payload.ModeTest, verdictPy(0, "check: pass"), ""), func(o *EvalOptions) {
			o.RequireGPU = true
			o.Probe = FixedProbe(payload.SystemInfo{GPU: "Test GPU", DeviceCount: 1, Runtime: "CUDA"}, true)
		})
		if err != nil {
			t.Fatal(err)
		}
	})
	t.Run("CUDA init failure", func(t *testing.T) {
		evalPy := "import sys\nsys.stderr.write('RuntimeError: CUDA error: no CUDA-capable device is detected\\n')\nsys.exit(110)\n"
		// No GPU tool answers either (TestDeviceFailureNeedsTheRunnersEvidence
		// has the other cases).
		res, err := evaluate(t, pyJob(payload.ModeTest, evalPy, ""), func(o *EvalOptions) { o.Environ = []string{"PATH=" + gpuTools(t, "")} })
		if FaultOf(err) != FaultMachine || !strings.Contains(res.Error, "GPU runtime failed") {
			t.Fatalf("fault %v err %v", FaultOf(err), err)
		}
		if res.Runs["test"].Run == nil {
			t.Error("the failed run should stay in the result")
		}
	})
	// A device failure printed in a timed run is the submission's claim:
	// the run fails, nothing is retried (issue 20: a faked GPU fault
	// re-rolled a leaderboard run).
	t.Run("device failure claimed in a timed run", func(t *testing.T) {
		evalPy := "import os, sys\nfd = int(os.environ['POPCORN_FD'])\nif sys.argv[1] == 'test':\n    os.write(fd, b'check: pass\\n')\n    sys.exit(0)\nsys.stderr.write('RuntimeError: CUDA error: no CUDA-capable device is detected\\n')\nsys.exit(110)\n"
		res, err := evaluate(t, pyJob(payload.ModeLeaderboard, evalPy, ""))
		if err != nil || !res.Success {
			t.Fatalf("a faked device failure became a runner failure (fault %v): %v", FaultOf(err), err)
		}
		if r := res.Runs["benchmark"].Run; r == nil || r.Passed || Verdict(res.Runs["benchmark"]) != "crashed" {
			t.Errorf("benchmark run: %+v", r)
		}
	})
	t.Run("profile without runtime", func(t *testing.T) {
		_, err := evaluate(t, pyJob(payload.ModeProfile, verdictPy(0, "check: pass"), ""))
		if FaultOf(err) != FaultMachine {
			t.Fatalf("fault %v err %v", FaultOf(err), err)
		}
	})
	t.Run("ENOSPC", func(t *testing.T) {
		if FaultOf(&os.PathError{Op: "write", Path: "x", Err: errNoSpace}) != FaultMachine {
			t.Error("ENOSPC is the machine's fault")
		}
	})
}

func TestCancelStopsTheRun(t *testing.T) {
	needPython(t)
	cfg := example(t, "vectoradd", "hang", payload.ModeTest)
	ctx, cancel := context.WithCancelCause(context.Background())
	time.AfterFunc(1500*time.Millisecond, func() { cancel(errors.New("received terminated")) })
	start := time.Now()
	res, err := Evaluate(ctx, cfg, EvalOptions{WorkDir: t.TempDir(), Environ: os.Environ(), Probe: FixedProbe(testSystem, false)})
	if FaultOf(err) != FaultCanceled || res.Success || !strings.Contains(res.Error, "received terminated") {
		t.Fatalf("fault %v: %v", FaultOf(err), err)
	}
	if time.Since(start) > 20*time.Second {
		t.Errorf("cancel took %s", time.Since(start))
	}
	assertNoDescendants(t)
}
