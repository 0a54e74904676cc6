package payload

import "time"

// FullResult is Kernelbot's FullResult, field for field. Success is false
// only when the runner itself failed; a failed compile or test is a
// successful run whose failure is inside Runs.
type FullResult struct {
	Success bool                  `json:"success"`
	Error   string                `json:"error"`
	System  SystemInfo            `json:"system"`
	Runs    map[string]EvalResult `json:"runs"`
}

// SystemInfo describes the machine that ran the job.
type SystemInfo struct {
	GPU         string `json:"gpu"`
	DeviceCount int    `json:"device_count"`
	CPU         string `json:"cpu"`
	Runtime     string `json:"runtime"` // "CUDA" | "ROCm" | ""
	Platform    string `json:"platform"`
	Torch       string `json:"torch"`
	Hostname    string `json:"hostname"`
}

// EvalResult is one evaluation run (test, benchmark, leaderboard, profile.N).
type EvalResult struct {
	Start       PyTime         `json:"start"`
	End         PyTime         `json:"end"`
	Compilation *CompileResult `json:"compilation"`
	Run         *RunResult     `json:"run"`
	Profile     *ProfileResult `json:"profile"`
}

// CompileResult is the outcome of nvcc (or the py warm-up run when it
// compiled an extension).
type CompileResult struct {
	NvccFound   bool   `json:"nvcc_found"`
	NvccVersion string `json:"nvcc_version"`
	Success     bool   `json:"success"`
	Command     string `json:"command"`
	Stdout      string `json:"stdout"`
	Stderr      string `json:"stderr"`
	ExitCode    int    `json:"exit_code"`
}

// RunResult is the outcome of running the evaluated program once.
type RunResult struct {
	Success  bool              `json:"success"`
	Passed   bool              `json:"passed"`
	Command  string            `json:"command"`
	Stdout   string            `json:"stdout"`
	Stderr   string            `json:"stderr"`
	ExitCode int               `json:"exit_code"`
	Duration float64           `json:"duration"` // seconds
	Result   map[string]string `json:"result"`
}

// ProfileResult points at profiler output.
type ProfileResult struct {
	Profiler    string  `json:"profiler"`
	Trace       string  `json:"trace"` // base64 of a zip of the profile directory
	DownloadURL *string `json:"download_url"`
}

// MaxResultBytes bounds a result.json wherever kbgen reads one: kbgen
// submit and serve download at most this much, and the host-side publish
// refuses a larger file unread. Kernelbot cuts outputs to about 16 KiB
// each, but a profile trace rides along base64-encoded.
const MaxResultBytes = 64 << 20

// DefaultDeviceCount is Kernelbot's SystemInfo.device_count default: a
// result that could not count GPUs says 1, never 0.
const DefaultDeviceCount = 1

// Failed builds the FullResult for a runner failure: success false, the
// error message, no runs. A system with no device count (nothing was
// probed) gets Kernelbot's default.
func Failed(system SystemInfo, err error) *FullResult {
	if system.DeviceCount == 0 {
		system.DeviceCount = DefaultDeviceCount
	}
	return &FullResult{Success: false, Error: err.Error(), System: system, Runs: map[string]EvalResult{}}
}

// PyTime marshals as Python's datetime.isoformat() does for a naive local
// time with microseconds ("2025-01-02T03:04:05.123456"), which is what
// Kernelbot's result parser reads back.
type PyTime struct{ time.Time }

const pyTimeLayout = "2006-01-02T15:04:05.000000"

func (t PyTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.Format(pyTimeLayout) + `"`), nil
}

func (t *PyTime) UnmarshalJSON(b []byte) error {
	s := string(b)
	if s == "null" {
		return nil
	}
	if len(s) < 2 || s[0] != '"' {
		return &time.ParseError{Value: s, Message: ": not a JSON string"}
	}
	s = s[1 : len(s)-1]
	for _, layout := range []string{time.RFC3339Nano, pyTimeLayout, "2006-01-02T15:04:05"} {
		if parsed, err := time.Parse(layout, s); err == nil {
			t.Time = parsed
			return nil
		}
	}
	_, err := time.Parse(pyTimeLayout, s)
	return err
}

// ImpliedMode names the mode a result's run keys imply, for a result read
// back without its job (`kbgen run --publish`): leaderboard when a
// leaderboard run, or a benchmark run beside a test run, is there; then
// benchmark, profile, and test.
func (r *FullResult) ImpliedMode() Mode {
	_, test := r.Runs[string(ModeTest)]
	if _, ok := r.Runs[string(ModeLeaderboard)]; ok {
		return ModeLeaderboard
	}
	if _, ok := r.Runs[string(ModeBenchmark)]; ok {
		if test {
			return ModeLeaderboard
		}
		return ModeBenchmark
	}
	if _, ok := r.Runs[string(ModeProfile)+".0"]; ok {
		return ModeProfile
	}
	return ModeTest
}

// AllPassed reports whether the runner succeeded and every run it made
// passed: the annotation's style, `kbgen local`'s exit code.
func (r *FullResult) AllPassed() bool {
	if !r.Success || len(r.Runs) == 0 {
		return false
	}
	for _, run := range r.Runs {
		if run.Run == nil || !run.Run.Passed {
			return false
		}
	}
	return true
}

// Describe is the one-line state of a result: the runner's line on what
// it wrote, and the sandbox's on what it vouched for.
func (r *FullResult) Describe() string {
	switch {
	case !r.Success:
		return "runner failed: " + r.Error
	case r.AllPassed():
		return "evaluated; all runs passed"
	}
	return "evaluated; not all runs passed"
}
