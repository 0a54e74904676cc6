package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/payload"
)

// trivialHarness is the smallest harness that speaks the protocol.
const trivialHarness = `import os, sys
cases = open(sys.argv[2]).read().splitlines()
f = os.fdopen(int(os.environ["POPCORN_FD"]), "w")
for i, c in enumerate(cases):
    f.write("test.%d.spec: %s\ntest.%d.status: pass\n" % (i, c, i))
f.write("check: pass\n")
`

// BenchmarkRunOverhead measures what `kbgen run` adds to the work the
// protocol itself demands: the same trivial test-mode job run by kbgen
// (as a whole process, with its real system probe) and run directly as
// `python3 submission.py; python3 eval.py test cases` with a POPCORN_FD
// pipe. The two alternate within one run so machine noise hits both. It
// reports both medians, their ratio and the median added wall time
// (target: under 30 ms).
//
//	go test -run '^$' -bench RunOverhead -benchtime 40x ./cmd/kbgen
func BenchmarkRunOverhead(b *testing.B) {
	py, err := exec.LookPath("python3")
	if err != nil {
		b.Skip("python3 not on PATH")
	}
	// Resolve shims (pyenv) so both sides start the interpreter directly.
	if out, err := exec.Command(py, "-c", "import sys; print(sys.executable)").Output(); err == nil {
		py = strings.TrimSpace(string(out))
	}
	dir := b.TempDir()
	bin := kbgenbin.Path(b)
	cfg := &payload.Config{
		Lang: payload.LangPython, Mode: payload.ModeTest, Main: "eval.py",
		Sources: map[string]string{"eval.py": trivialHarness, "submission.py": "def custom_kernel(x):\n    return x\n"},
		Tests:   []payload.Case{{{Key: "size", Value: payload.IntScalar(8)}}, {{Key: "size", Value: payload.IntScalar(16)}}},
	}
	js, _ := json.Marshal(cfg)
	jobFile := filepath.Join(dir, "job.json")
	direct := filepath.Join(dir, "direct")
	cases := filepath.Join(dir, "cases.txt")
	for p, content := range map[string]string{jobFile: string(js), cases: "size: 8\nsize: 16\n", filepath.Join(direct, "eval.py"): trivialHarness, filepath.Join(direct, "submission.py"): cfg.Sources["submission.py"]} {
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	env := append(os.Environ(), "PATH="+filepath.Dir(py)+string(os.PathListSeparator)+os.Getenv("PATH"))
	runDirect := func() {
		warm := exec.Command(py, "submission.py")
		warm.Dir, warm.Env = direct, env
		if err := warm.Run(); err != nil {
			b.Fatal(err)
		}
		r, w, err := os.Pipe()
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command(py, "eval.py", "test", cases)
		cmd.Dir, cmd.ExtraFiles = direct, []*os.File{w}
		cmd.Env = append(env, "POPCORN_FD=3")
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		w.Close()
		verdict := make([]byte, 4096)
		n, _ := r.Read(verdict)
		r.Close()
		if err := cmd.Wait(); err != nil || !strings.Contains(string(verdict[:n]), "check: pass") {
			b.Fatalf("direct run: %v %q", err, verdict[:n])
		}
	}
	out := filepath.Join(dir, "result.json")
	runKbgenProcess := func() {
		cmd := exec.Command(bin, "run", "--payload-file", jobFile, "--out", out, "--no-upload", "--workdir", filepath.Join(dir, "work"))
		cmd.Env = env
		if o, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(o), "all runs passed") {
			b.Fatalf("kbgen run: %v\n%s", err, o)
		}
	}
	var direct_, kb, added []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		runDirect()
		t1 := time.Now()
		runKbgenProcess()
		t2 := time.Now()
		direct_ = append(direct_, t1.Sub(t0))
		kb = append(kb, t2.Sub(t1))
		added = append(added, t2.Sub(t1)-t1.Sub(t0))
	}
	b.StopTimer()
	med := func(d []time.Duration) time.Duration { s := slices.Clone(d); slices.Sort(s); return s[len(s)/2] }
	b.ReportMetric(float64(med(direct_).Microseconds())/1000, "direct-median-ms")
	b.ReportMetric(float64(med(kb).Microseconds())/1000, "kbgen-median-ms")
	b.ReportMetric(float64(med(kb))/float64(med(direct_)), "ratio")
	b.ReportMetric(float64(med(added).Microseconds())/1000, "added-median-ms")
}
