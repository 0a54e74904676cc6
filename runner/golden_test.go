package runner

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/golden"
	"github.com/gpu-mode/kbgen/payload"
)

// goldenDir holds one result.json per scenario, timings masked: what
// Kernelbot's backend would receive for these jobs.
const goldenDir = "../golden/results"

var (
	// Random parts of the run directories (unpredictable on purpose).
	randomDir = regexp.MustCompile(`(test|benchmark|leaderboard|profile\.\d+|run|cases)-\d+`)
	timingKey = regexp.MustCompile(`^benchmark\.\d+\.(mean|std|err|best|worst)$`)
)

// maskResult replaces what differs between runs and machines: times,
// durations (except a timeout's, which is the timeout), benchmark
// timings, temporary paths, zip bytes.
func maskResult(t *testing.T, res *payload.FullResult, workDir string) []byte {
	t.Helper()
	bin, _ := filepath.Abs("testdata/bin")
	clean := func(s string) string {
		s = strings.ReplaceAll(s, workDir, "$WORKDIR")
		s = strings.ReplaceAll(s, bin, "$BIN")
		return randomDir.ReplaceAllString(s, "$1-N")
	}
	fixed := payload.PyTime{Time: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)}
	for k, r := range res.Runs {
		r.Start, r.End = fixed, fixed
		if c := r.Compilation; c != nil {
			c.Command, c.Stdout, c.Stderr = clean(c.Command), clean(c.Stdout), clean(c.Stderr)
		}
		if x := r.Run; x != nil {
			x.Command, x.Stdout, x.Stderr = clean(x.Command), clean(x.Stdout), clean(x.Stderr)
			if x.ExitCode != ExitTimeout {
				x.Duration = 0
			}
			for key := range x.Result {
				if timingKey.MatchString(key) {
					x.Result[key] = "<ns>"
				}
			}
		}
		if p := r.Profile; p != nil {
			p.Trace = "<zip: " + strings.Join(zipNames(t, p.Trace), ", ") + ">"
		}
		res.Runs[k] = r
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestGoldenResults(t *testing.T) {
	needPython(t)
	cuda := payload.SystemInfo{GPU: "NVIDIA H100 80GB HBM3", DeviceCount: 1, CPU: "test cpu", Runtime: "CUDA", Platform: "Linux-test", Hostname: "test"}
	timeoutJob := example(t, "vectoradd", "hang", payload.ModeTest)
	// Long enough for python to start and print its first line on a
	// loaded CI machine (at 3 s, under a load average of 20, it sometimes
	// had not, and stdout differed); the golden file records it.
	timeoutJob.TestTimeout = 8
	noMain := example(t, "identity", "submission", payload.ModeTest)
	noMain.Main = ""
	compileError := cuJob(payload.ModeLeaderboard)
	compileError.Sources["submission.cu"] = "#error nope\n"
	scenarios := []struct {
		name   string
		cfg    *payload.Config
		system payload.SystemInfo
	}{
		{"py-leaderboard-pass", example(t, "vectoradd", "submission", payload.ModeLeaderboard), testSystem},
		{"py-test-fail", example(t, "identity", "wrong", payload.ModeTest), testSystem},
		{"py-leaderboard-cheat-input", example(t, "identity", "cheat-input", payload.ModeLeaderboard), testSystem},
		{"py-test-timeout", timeoutJob, testSystem},
		{"py-bad-job", noMain, testSystem},
		{"cu-test-pass", cuJob(payload.ModeTest), cuda},
		{"cu-leaderboard-compile-error", compileError, cuda},
		{"cu-profile-ncu", cuJob(payload.ModeProfile), cuda},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			dir := t.TempDir()
			res, _ := evaluate(t, sc.cfg, func(o *EvalOptions) {
				o.WorkDir = dir
				o.Environ = standIns(t)
				o.Probe = FixedProbe(sc.system, sc.system.GPU != "")
			})
			got := maskResult(t, res, dir)
			path := filepath.Join(goldenDir, sc.name+".json")
			golden.Check(t, path, got)
		})
	}
}
