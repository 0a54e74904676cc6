package e2e

import (
	"os"
	"slices"
	"testing"
	"time"
)

// TestPhases splits an eval job's log (testdata/eval-job.log, stamped as
// the agent stamps it) at its marks: the container's exit and the hook's
// publish are two phases, the numbers TestE2EOverhead and
// docs/performance.md report.
func TestPhases(t *testing.T) {
	t.Parallel()
	log, err := os.ReadFile("testdata/eval-job.log")
	if err != nil {
		t.Fatal(err)
	}
	start := time.UnixMilli(1790000000000)
	ps := Phases(string(log), start.Add(-40*time.Millisecond), start.Add(3290*time.Millisecond))
	want := []Phase{
		{"agent: accept → job process", 40 * time.Millisecond},
		{"agent: job start → first hook", 0},
		{"environment hook", 70 * time.Millisecond},
		{"checkout", 130 * time.Millisecond},
		{"post-checkout hook (pin plugin)", 80 * time.Millisecond},
		{"plugin hook, kbgen sandbox, docker start", 420 * time.Millisecond},
		{"evaluation (kbgen run)", 1200 * time.Millisecond},
		{"container exit and removal, vouch", 250 * time.Millisecond},
		{"hook's publish", 1100 * time.Millisecond},
		{"artifact_paths upload", 30 * time.Millisecond},
		{"agent: last line → finish", 10 * time.Millisecond},
	}
	if !slices.Equal(ps, want) {
		t.Errorf("phases:\n%s\nwant:\n%s", FormatPhases(ps), FormatPhases(want))
	}
}
