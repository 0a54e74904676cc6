package runner

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/mdtext"
	"github.com/gpu-mode/kbgen/payload"
)

// runOrder is the order runs are shown in.
func runOrder(runs map[string]payload.EvalResult) []string {
	rank := func(k string) int {
		switch {
		case k == "test":
			return 0
		case k == "benchmark":
			return 1
		case k == "leaderboard":
			return 2
		}
		return 3
	}
	keys := make([]string, 0, len(runs))
	for k := range runs {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if rank(keys[i]) != rank(keys[j]) {
			return rank(keys[i]) < rank(keys[j])
		}
		return naturalLess(keys[i], keys[j])
	})
	return keys
}

// naturalLess orders "profile.2" before "profile.10".
func naturalLess(a, b string) bool {
	pa, na, _ := strings.Cut(a, ".")
	pb, nb, _ := strings.Cut(b, ".")
	ia, ea := strconv.Atoi(na)
	ib, eb := strconv.Atoi(nb)
	if pa == pb && ea == nil && eb == nil {
		return ia < ib
	}
	return a < b
}

// Verdict is the one-word state of a run.
func Verdict(r payload.EvalResult) string {
	switch {
	case r.Compilation != nil && !r.Compilation.Success:
		return "compile failed"
	case r.Run == nil:
		return "not run"
	case r.Run.ExitCode == ExitTimeout && !r.Run.Success:
		return "timed out"
	case r.Run.Passed:
		return "passed"
	case !r.Run.Success:
		return "crashed"
	}
	return "failed"
}

// caseLine is one test or benchmark of a run, read from the verdict keys
// Kernelbot's harnesses write (test.N.spec/status/error,
// benchmark.N.spec/mean/err/status/error).
type caseLine struct {
	Name, Spec, Status, Detail string
}

func caseLines(r *payload.RunResult) []caseLine {
	var out []caseLine
	for _, kind := range []string{"test", "benchmark"} {
		for i := 0; ; i++ {
			p := fmt.Sprintf("%s.%d.", kind, i)
			spec, ok := r.Result[p+"spec"]
			if !ok {
				break
			}
			c := caseLine{Name: fmt.Sprintf("%s.%d", kind, i), Spec: spec, Status: r.Result[p+"status"]}
			if mean, ok := r.Result[p+"mean"]; ok {
				c.Detail = formatDuration(mean, r.Result[p+"err"])
				if c.Status == "" {
					c.Status = "ok"
				}
			}
			if e := r.Result[p+"error"]; e != "" {
				c.Detail = e
			}
			out = append(out, c)
		}
	}
	return out
}

// formatDuration renders a nanosecond mean (± error) in a readable unit.
func formatDuration(meanNS, errNS string) string {
	m, err := strconv.ParseFloat(meanNS, 64)
	if err != nil {
		return "mean " + meanNS
	}
	unit, div := "ns", 1.0
	switch {
	case m >= 1e9:
		unit, div = "s", 1e9
	case m >= 1e6:
		unit, div = "ms", 1e6
	case m >= 1e3:
		unit, div = "µs", 1e3
	}
	s := fmt.Sprintf("mean %.3g %s", m/div, unit)
	if e, err := strconv.ParseFloat(errNS, 64); err == nil {
		s += fmt.Sprintf(" ± %.2g", e/div)
	}
	return s
}

// WriteSummary writes a plain-text summary of res for a terminal: mode,
// machine, and per run its verdict and cases.
func WriteSummary(w io.Writer, mode payload.Mode, res *payload.FullResult) {
	gpu := res.System.GPU
	if gpu == "" {
		gpu = "none"
	}
	fmt.Fprintf(w, "mode %s on %s (GPU: %s, runtime: %s)\n", mode, orNone(res.System.Hostname), gpu, orNone(res.System.Runtime))
	if !res.Success {
		fmt.Fprintf(w, "runner failed: %s\n", res.Error)
	}
	for _, k := range runOrder(res.Runs) {
		r := res.Runs[k]
		line := fmt.Sprintf("%-12s %s", k, Verdict(r))
		if r.Run != nil {
			line += fmt.Sprintf(" (exit code %d)", r.Run.ExitCode)
		}
		fmt.Fprintln(w, line)
		if r.Compilation != nil && !r.Compilation.Success {
			fmt.Fprintf(w, "  compile: %s\n", firstLine(r.Compilation.Stderr))
		}
		if r.Run == nil {
			continue
		}
		for _, c := range caseLines(r.Run) {
			fmt.Fprintf(w, "  %-12s %-6s %s", c.Name, c.Status, c.Spec)
			if c.Detail != "" {
				fmt.Fprintf(w, "  %s", c.Detail)
			}
			fmt.Fprintln(w)
		}
	}
}

// Markdown is the annotation posted to the Buildkite build: the same
// summary as a table. Only verdict keys and case specs appear, never
// stdout, stderr or the environment. Every string from the result is the
// submission's to choose (a forged result.json, an exception message, a
// run key), so each goes through mdtext.Code: an inline code span that
// cannot become a link, an image, HTML or a new row. At most
// maxAnnotationRows rows are listed, then how many were left out.
func Markdown(mode payload.Mode, res *payload.FullResult) string {
	var b strings.Builder
	gpu := res.System.GPU
	if gpu == "" {
		gpu = "none"
	}
	status := "all runs passed"
	if !res.Success {
		status = "runner failed: " + mdtext.Code(res.Error)
	} else if !res.AllPassed() {
		status = "not all runs passed"
	}
	fmt.Fprintf(&b, "**kbgen** %s on %s (%s): %s\n\n", mdtext.Code(string(mode)), mdtext.Code(gpu), mdtext.Code(orNone(res.System.Runtime)), status)
	if len(res.Runs) == 0 {
		return b.String()
	}
	b.WriteString("| run | case | spec | result |\n| --- | --- | --- | --- |\n")
	rows, left := 0, 0
	row := func(format string, args ...any) {
		if rows >= maxAnnotationRows {
			left++
			return
		}
		rows++
		fmt.Fprintf(&b, format, args...)
	}
	for _, k := range runOrder(res.Runs) {
		r := res.Runs[k]
		row("| %s | | | %s |\n", mdtext.Code(k), Verdict(r))
		if r.Run == nil {
			continue
		}
		for _, c := range caseLines(r.Run) {
			row("| | %s | %s | %s %s |\n", mdtext.Code(c.Name), mdtext.Code(c.Spec), mdtext.Code(c.Status), mdtext.Code(c.Detail))
		}
	}
	if left > 0 {
		fmt.Fprintf(&b, "\n%d more rows are in result.json.\n", left)
	}
	return b.String()
}

// maxAnnotationRows bounds the annotation's table: a result with a
// million cases must not make a megabyte annotation (Buildkite's limit is
// 1 MiB a body, buildkite/docs pages/pipelines/configure/annotations.md).
const maxAnnotationRows = 200

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
