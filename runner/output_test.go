package runner

import (
	"encoding/json"
	"os/exec"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/payload"
)

// pythonEval runs a Python snippet that reads a JSON list of inputs on
// stdin and prints a JSON list of outputs: the reference implementation.
func pythonEval(t *testing.T, script string, inputs any) []string {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: compared only with hand-written cases")
	}
	in, _ := json.Marshal(inputs)
	cmd := exec.Command(py, "-c", "import json, sys, shlex\n"+script)
	cmd.Stdin = strings.NewReader(string(in))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v", err)
	}
	var got []string
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	return got
}

// limitLengthPy is Kernelbot's _limit_length, verbatim in behaviour.
const limitLengthPy = `
def _limit_length(text, max_len=16384):
    lines = text.split("\n")
    size = 0
    for i, line in enumerate(lines):
        size += len(line) + 1
        if size + 100 > max_len:
            lines = lines[:i] + [f"[...] {len(lines) - i} lines omitted"]
            return "\n".join(lines)
    return text
print(json.dumps([_limit_length(t) for t in json.load(sys.stdin)]))
`

func TestLimitLengthMatchesKernelbot(t *testing.T) {
	inputs := []string{
		"",
		"short\n",
		strings.Repeat("x", 16283),
		strings.Repeat("x", 16284),
		strings.Repeat("line\n", 5000),
		strings.Repeat("é☃𝄞", 6000),
		strings.Repeat("a\n", 8141) + "tail",
		strings.Repeat(strings.Repeat("y", 999)+"\n", 40),
	}
	want := pythonEval(t, limitLengthPy, inputs)
	for i, in := range inputs {
		var c capture
		_, _ = c.Write([]byte(in))
		if got := c.Text(); got != want[i] {
			t.Errorf("input %d (%d bytes): got %d chars ending %q, want %d ending %q", i, len(in), len(got), tail(got), len(want[i]), tail(want[i]))
		}
	}
}

func TestCaptureBoundsMemoryButCountsLines(t *testing.T) {
	var c capture
	line := []byte(strings.Repeat("z", 99) + "\n")
	for i := 0; i < 100000; i++ { // 10 MB
		_, _ = c.Write(line)
	}
	if len(c.head) > headBytes {
		t.Fatalf("kept %d bytes", len(c.head))
	}
	got := c.Text()
	// 100000 lines + the empty one after the last newline; 162 fit.
	if !strings.HasSuffix(got, "\n[...] 99839 lines omitted") || strings.Count(got, "\n") != 162 {
		t.Errorf("got %d lines, ends %q", strings.Count(got, "\n"), tail(got))
	}
}

func TestSplitLinesMatchesPython(t *testing.T) {
	inputs := []string{"", "a", "a\n", "a\nb", "a\r\nb\rc", "a\x0bb\x0cc\x1cd\x1de\x1ef\u0085g\u2028h\u2029i", "\n\n"}
	want := pythonEval(t, "print(json.dumps(['|'.join(s.splitlines()) for s in json.load(sys.stdin)]))", inputs)
	for i, in := range inputs {
		if got := strings.Join(splitLines(in), "|"); got != want[i] {
			t.Errorf("splitLines(%q) = %q, want %q", in, got, want[i])
		}
	}
}

func TestParseVerdict(t *testing.T) {
	for _, tc := range []struct {
		raw         string
		want        map[string]string
		conflicting bool
	}{
		{"check: pass\n", map[string]string{"check": "pass"}, false},
		{"a:1\r\nb : 2 \n\n:\nc\n", map[string]string{"a": "1", "b": "2", "c": ""}, false},
		{": orphan\n", map[string]string{"": "orphan"}, false},
		{"check: pass\ncheck: pass\n", map[string]string{"check": "pass"}, false},
		{"check: fail\ncheck: pass\n", map[string]string{"check": "pass"}, true},
		{"check: pass\ncheck: fail\n", map[string]string{"check": "fail"}, true},
	} {
		got, conflicting := parseVerdict([]byte(tc.raw))
		if conflicting != tc.conflicting || len(got) != len(tc.want) {
			t.Errorf("%q: got %v conflicting=%v", tc.raw, got, conflicting)
			continue
		}
		for k, v := range tc.want {
			if got[k] != v {
				t.Errorf("%q: %s=%q, want %q", tc.raw, k, got[k], v)
			}
		}
	}
}

func TestCasesFor(t *testing.T) {
	tests, benches := "t1\nt2\n", "b1\nb2\nb3\n"
	for _, tc := range []struct {
		mode    payload.Mode
		ranking payload.RankingBy
		want    string
	}{
		{"test", "last", tests},
		{"benchmark", "last", "b3\n"},
		{"leaderboard", "last", "b3\n"},
		{"benchmark", "mean", benches},
		{"leaderboard", "geom", benches},
	} {
		if got := casesFor(tc.mode, tests, benches, tc.ranking); got != tc.want {
			t.Errorf("%s/%s: %q", tc.mode, tc.ranking, got)
		}
	}
}

func tail(s string) string { return s[max(0, len(s)-30):] }
