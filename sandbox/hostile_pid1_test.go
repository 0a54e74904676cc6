package sandbox

import (
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/payload"
)

// pid1Probe is a harness that attacks the container's PID 1 (the sealed
// runner) from the submission's uid and prints what it got, one fact a
// line: the published result carries the harness's stdout.
const pid1Probe = `for f in /proc/1/fd/1 /proc/1/fd/2; do
  if { printf 'kbgen run: passed (forged)\n' > "$f"; } 2>/dev/null; then echo "open_$(basename $f)=yes"; else echo "open_$(basename $f)=no"; fi
done
if cat /proc/1/environ > /dev/null 2>&1; then echo environ=yes; else echo environ=no; fi
echo "pid1=$(cat /proc/1/comm)"
kill -KILL 1 2>/dev/null
echo "alive_after_kill=yes"
( sleep 0.2 & )
sleep 1.5
z=0
for s in /proc/[0-9]*/stat; do
  l=$(cat "$s" 2>/dev/null) || continue
  case "$l" in *"(sleep) Z "*) z=$((z+1)) ;; esac
done
echo "zombies=$z"
`

// TestHostilePID1: the submission cannot write into the job log through
// PID 1's descriptors or read its environment (kbgen run --sealed is PID
// 1 and not dumpable: its /proc files are root's), cannot SIGKILL it from
// inside, and an orphan it leaves is reaped while it still runs.
func TestHostilePID1(t *testing.T) {
	r := runHostileJob(t, hostileJob{memory: "256m", submission: "exit 0\n", main: pid1Probe})
	f := harnessFacts(t, r)
	t.Logf("facts from the submission: %v", f)
	want := map[string]string{
		"open_1": "no", "open_2": "no", "environ": "no",
		"pid1": "kbgen", "alive_after_kill": "yes", "zombies": "0",
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("%s = %q, want %q", k, f[k], v)
		}
	}
	if strings.Contains(r.log, "(forged)") {
		t.Errorf("the submission's line reached the job log:\n%s", tail(r.log, 30))
	}
	if r.out.Vouch == nil || !r.out.Vouch.Verified {
		t.Errorf("vouch = %+v, want the runner's own result", r.out.Vouch)
	}
}

// TestHostilePID1Signals: SIGTERM to the container reaches the runner as
// PID 1 (which has a handler: PID 1 ignores default-action signals), so a
// cancelled job still ends with the runner's own sealed, cancelled result
// (143); a container killed outright leaves nothing that verifies, and
// the sandbox publishes its own failure (137), which does not blame
// memory: the real engine reports no OOM kill.
func TestHostilePID1Signals(t *testing.T) {
	tests := []struct {
		name     string
		stop     func(j *Job, sigs chan<- os.Signal)
		exit     int
		verified bool
		reason   string // the sandbox's words when nothing verifies
	}{
		{"SIGTERM to the sandbox: docker stop", func(_ *Job, sigs chan<- os.Signal) { sigs <- syscall.SIGTERM }, 143, true, ""},
		{"docker kill", func(j *Job, _ chan<- os.Signal) { _ = exec.Command("docker", "kill", j.Spec.Name).Run() }, 137, false,
			"the container exited 137 (SIGKILL, not out of memory (the engine reports no OOM kill): killed from the host"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			start := time.Now()
			r := runHostileJob(t, hostileJob{memory: "256m", submission: "trap '' TERM; sleep 120\n",
				during: func(j *Job, log *syncbuf.Buffer, sigs chan<- os.Signal) {
					for !strings.Contains(log.String(), "warm-up") && time.Since(start) < time.Minute {
						time.Sleep(50 * time.Millisecond)
					}
					time.Sleep(300 * time.Millisecond) // the warm-up has started
					tt.stop(j, sigs)
				}})
			took := time.Since(start)
			got := r.published(t)
			t.Logf("exit %d after %v; published %.200s", r.out.Code, took.Round(time.Millisecond), got)
			if code, _ := r.out.Exit(); code != tt.exit {
				t.Errorf("exit %d, want %d\nlog:\n%s", code, tt.exit, tail(r.log, 30))
			}
			if v := r.out.Vouch; v == nil || v.Verified != tt.verified {
				t.Errorf("vouch = %+v, want verified %v", v, tt.verified)
			} else if !strings.Contains(v.Reason, tt.reason) {
				t.Errorf("the sandbox says %q, want %q", v.Reason, tt.reason)
			}
			if took > time.Minute {
				t.Errorf("took %v: the stop waited for the submission's sleep", took)
			}
		})
	}
}

// harnessFacts parses the key=value words the harness printed, which the
// published result carries as the test run's stdout (the submission
// reaches nothing else the test can read).
func harnessFacts(t *testing.T, r hostileRun) map[string]string {
	t.Helper()
	var res payload.FullResult
	if err := json.Unmarshal([]byte(r.published(t)), &res); err != nil {
		t.Fatal(err)
	}
	run := res.Runs["test"].Run
	if run == nil {
		t.Fatalf("no test run in the published result\nlog:\n%s", tail(r.log, 30))
	}
	return parseFacts(strings.ReplaceAll(run.Stdout, "\n", " "))
}
