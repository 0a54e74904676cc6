package runner

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/mdtext/mdtexttest"
	"github.com/gpu-mode/kbgen/payload"
)

func TestSummaries(t *testing.T) {
	res := &payload.FullResult{
		Success: true,
		System:  payload.SystemInfo{GPU: "NVIDIA H100", Runtime: "CUDA", Hostname: "node-1"},
		Runs: map[string]payload.EvalResult{
			"test": {Run: &payload.RunResult{Success: true, Passed: true, Result: map[string]string{
				"test.0.spec": "size: 8", "test.0.status": "pass",
				"test.1.spec": "size: 9", "test.1.status": "fail", "test.1.error": "mismatch | at 0",
			}}},
			"benchmark": {Run: &payload.RunResult{Success: true, Passed: true, Result: map[string]string{
				"benchmark.0.spec": "size: 16", "benchmark.0.mean": "1523000.0", "benchmark.0.err": "2100.5",
			}}},
			"leaderboard": {Run: &payload.RunResult{ExitCode: ExitTimeout}},
			"profile.10":  {Compilation: &payload.CompileResult{Stderr: "x.cu(1): error\nmore"}},
			"profile.2":   {Run: &payload.RunResult{ExitCode: -11}},
		},
	}
	var b strings.Builder
	WriteSummary(&b, payload.ModeLeaderboard, res)
	want := `mode leaderboard on node-1 (GPU: NVIDIA H100, runtime: CUDA)
test         passed (exit code 0)
  test.0       pass   size: 8
  test.1       fail   size: 9  mismatch | at 0
benchmark    passed (exit code 0)
  benchmark.0  ok     size: 16  mean 1.52 ms ± 0.0021
leaderboard  timed out (exit code 114)
profile.2    crashed (exit code -11)
profile.10   compile failed
  compile: x.cu(1): error
`
	if b.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", b.String(), want)
	}
	md := Markdown(payload.ModeLeaderboard, res)
	for _, s := range []string{"**kbgen** `leaderboard` on `NVIDIA H100` (`CUDA`): not all runs passed", "| | `test.1` | `size: 9` | `fail` `mismatch \\| at 0` |", "mean 1.52 ms"} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
	if res.AllPassed() || !(&payload.FullResult{Success: true, Runs: map[string]payload.EvalResult{"test": {Run: &payload.RunResult{Passed: true}}}}).AllPassed() {
		t.Error("AllPassed")
	}
}

// TestMarkdownIsInert puts each hostile string everywhere a result (or a
// forged result.json) can carry one: the runner's error, the system, a
// run key, a case's spec, status, error and mean. The annotation, as
// rendered by a GFM renderer, holds no link, image or HTML and exactly
// its own rows.
func TestMarkdownIsInert(t *testing.T) {
	t.Parallel()
	for name, s := range mdtexttest.Hostile {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			failed := &payload.FullResult{Error: s, System: payload.SystemInfo{GPU: s, Runtime: s}}
			mdtexttest.Inert(t, mdtexttest.Render(t, Markdown(payload.ModeTest, failed)), 0)
			res := &payload.FullResult{Success: true, System: payload.SystemInfo{GPU: s, Runtime: s}, Runs: map[string]payload.EvalResult{
				s: {Run: &payload.RunResult{Success: true, Result: map[string]string{
					"test.0.spec": s, "test.0.status": s, "test.0.error": s,
					"benchmark.0.spec": s, "benchmark.0.mean": s, "benchmark.0.err": s,
				}}},
			}}
			// header, the run, its test and its benchmark
			mdtexttest.Inert(t, mdtexttest.Render(t, Markdown(payload.ModeLeaderboard, res)), 4)
		})
	}
}

// TestMarkdownIsBounded: a result with a hundred thousand cases makes an
// annotation of maxAnnotationRows rows and a note, far under Buildkite's
// 1 MiB.
func TestMarkdownIsBounded(t *testing.T) {
	t.Parallel()
	cases := map[string]string{}
	for i := range 100000 {
		cases[fmt.Sprintf("test.%d.spec", i)] = strings.Repeat("x", 1000)
		cases[fmt.Sprintf("test.%d.status", i)] = "pass"
	}
	res := &payload.FullResult{Success: true, Runs: map[string]payload.EvalResult{"test": {Run: &payload.RunResult{Success: true, Passed: true, Result: cases}}}}
	md := Markdown(payload.ModeTest, res)
	if len(md) > 128<<10 {
		t.Errorf("annotation is %d bytes", len(md))
	}
	if !strings.Contains(md, fmt.Sprintf("%d more rows are in result.json", 100001-maxAnnotationRows)) {
		t.Errorf("no note of the rows left out:\n%s", md[len(md)-200:])
	}
}
