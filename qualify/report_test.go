package qualify

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/golden"
)

func f64(f float64) *float64 { return &f }

// sampleReport has what the tables show: a passing agent with a GPU
// result, a failing one with no loaded phase and a noise source, and one
// whose calibration could not run.
func sampleReport(pass bool) *Report {
	return &Report{Pass: pass, Launcher: "fake", Iterations: 4242, GPU: "ran",
		Thresholds: Thresholds{MaxCV: 1, MaxShift: 2, MaxSteal: 5},
		Agents: []AgentResult{
			{Name: "gpu0", CPUs: "1-3", CVPercent: 0.41, LoadedCVPercent: f64(0.5), ShiftPercent: f64(1), StealPercent: 0, Verdict: Pass,
				GPU: &GPUResult{Device: "GPU-0", QuietMeanMS: 0.12345, MatmulsPerSample: 64, CVPercent: 0.3, LoadedCVPercent: f64(0.4), ShiftPercent: f64(-0.5), Verdict: Pass}},
			{Name: "gpu1", CPUs: "4-6", CVPercent: 8.16, StealPercent: 7.25, NoisyRuns: 3, NoiseSources: []string{"steal", "throttle"},
				Verdict: Fail, Why: []string{"CV 8.16 % > 1 %", "steal 7.2 % > 5 %"}, LoadSkipped: "no other agent to load"},
			{Name: "gpu2", CPUs: "7", Verdict: Fail, Why: []string{"ignored"}, Error: "docker: no GPU runtime"},
		}}
}

func TestReport(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		pass    bool
		write   func(*Report, *bytes.Buffer) error
		golden  string
		wantErr int
	}{
		{"table of a failing node", false, func(r *Report, b *bytes.Buffer) error { return r.WriteTable(b) }, "report-fail.txt", exitcode.Failure},
		{"table of a passing node", true, func(r *Report, b *bytes.Buffer) error { return r.WriteTable(b) }, "report-pass.txt", exitcode.OK},
		{"json", false, func(r *Report, b *bytes.Buffer) error { return r.WriteJSON(b) }, "report.json", exitcode.Failure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := sampleReport(tc.pass)
			var b bytes.Buffer
			if err := tc.write(r, &b); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, "../golden/qualify/"+tc.golden, b.Bytes())
			if got := exitcode.Of(r.Err()); got != tc.wantErr {
				t.Errorf("exit code %d, want %d", got, tc.wantErr)
			}
		})
	}
}

// The JSON report is the documented one: it reads back into a Report.
func TestReportJSONRoundTrips(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	if err := sampleReport(false).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Report
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Pass || len(back.Agents) != 3 || back.Agents[0].GPU == nil || back.Agents[1].Verdict != Fail {
		t.Errorf("read back %+v", back)
	}
}
