package runner

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/seal"
)

// killPID1Py is a harness whose test run sends PID 1 signals Go's
// runtime would die of (insideSignals), then passes if it got them at
// their default itself (an ignored disposition would be inherited).
const killPID1Py = `import os, signal, sys, time
names = ("SIGHUP", "SIGQUIT", "SIGABRT", "SIGSEGV", "SIGSYS")
for s in names:
    os.kill(1, getattr(signal, s))
    time.sleep(0.1)
ok = all(signal.getsignal(getattr(signal, s)) == signal.SIG_DFL for s in names)
os.write(int(os.environ['POPCORN_FD']), b'check: pass\n' if ok else b'check: fail\n')
`

// pid1Run is `kbgen run --sealed` started as PID 1 of a new PID namespace
// with its own /proc, as the sandbox's container runs it (no --init).
type pid1Run struct {
	cmd    *exec.Cmd
	key    seal.Key
	outDir string
	stdout bytes.Buffer
	stderr bytes.Buffer
}

// startPID1 starts the real kbgen on cfg under unshare, or skips the test
// visibly where no PID namespace can be made (not root, no unshare). With
// workTmpfs the work dir is a 2 MiB tmpfs of the namespace's own, as the
// sandbox's container has.
func startPID1(t *testing.T, cfg *payload.Config, plant func(outDir string), workTmpfs bool) *pid1Run {
	t.Helper()
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1): the runner as PID 1 not tested here (sandbox.TestHostilePID1 runs it in a container)")
	}
	if out, err := exec.Command(unshare, "--pid", "--fork", "--mount-proc", "true").CombinedOutput(); err != nil {
		t.Skipf("cannot make a PID namespace (%v: %s): the runner as PID 1 not tested here", err, out)
	}
	dir := t.TempDir()
	r := &pid1Run{outDir: filepath.Join(dir, "out")}
	if err := os.Mkdir(r.outDir, 0o755); err != nil {
		t.Fatal(err)
	}
	plant(r.outDir)
	if r.key, err = seal.NewKey(); err != nil {
		t.Fatal(err)
	}
	work := filepath.Join(dir, "work")
	args := []string{"--pid", "--fork", "--mount-proc"}
	if workTmpfs {
		if err := os.Mkdir(work, 0o755); err != nil {
			t.Fatal(err)
		}
		args = append(args, "sh", "-c", `mount -t tmpfs -o size=2m kbgen-work "$0" && exec "$@"`, work)
	}
	args = append(args, kbgenbin.Path(t), "run", "--sealed", "--no-upload",
		"--payload-file", writeJSON(t, filepath.Join(dir, "job.json"), cfg),
		"--system", writeJSON(t, filepath.Join(dir, "system.json"), testSystem),
		"--out", filepath.Join(r.outDir, contract.ResultFile), "--workdir", work)
	r.cmd = exec.Command(unshare, args...)
	r.cmd.Stdin = strings.NewReader(r.key.Text())
	r.cmd.Stdout, r.cmd.Stderr = &r.stdout, &r.stderr
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if r.cmd.ProcessState == nil {
			_ = r.cmd.Process.Kill()
			_ = r.cmd.Wait()
		}
	})
	return r
}

// runner is kbgen's pid outside its namespace: unshare's one child.
func (r *pid1Run) runner(t *testing.T) int {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile("/proc/" + strconv.Itoa(r.cmd.Process.Pid) + "/task/" + strconv.Itoa(r.cmd.Process.Pid) + "/children")
		if f := strings.Fields(string(b)); len(f) == 1 {
			pid, _ := strconv.Atoi(f[0])
			return pid
		}
	}
	t.Fatal("unshare started no runner")
	return 0
}

// wait waits up to limit for the run to end and returns its exit code
// and sealed result.
func (r *pid1Run) wait(t *testing.T, limit time.Duration) (int, seal.Contents) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(limit):
		unblockFIFOs(r.outDir)
		_ = r.cmd.Process.Kill()
		<-done
		t.Fatalf("the runner did not end within %v\n%s", limit, r.stderr.String())
	}
	c, err := seal.Open(r.stdout.Bytes(), r.key)
	if err != nil {
		t.Fatalf("no sealed result (exit %d): %v\n%s", r.cmd.ProcessState.ExitCode(), err, r.stderr.String())
	}
	return r.cmd.ProcessState.ExitCode(), c
}

// fillWorkPy is a harness whose test run fills the work dir's tmpfs and
// passes. The runner frees the test run's files when it ends, so the
// harness first hard-links its cases file outside its run directory (a
// link to a harness file would fail the run: its ctime moves): that page
// stays taken, and the runner's next cases file fails with ENOSPC.
const fillWorkPy = `import os, sys
if sys.argv[1] == 'test':
    work = os.path.join(os.getcwd(), '..', '..')
    os.link(sys.argv[2], os.path.join(work, 'keep'))
    try:
        with open(os.path.join(work, 'fill'), 'wb', buffering=0) as f:
            while True:
                f.write(b'x' * 4096)
    except OSError:
        pass
os.write(int(os.environ['POPCORN_FD']), b'check: pass\n')
`

// The runner as PID 1, as in the sandbox's container: a submission that
// sends it SIGHUP, SIGQUIT, SIGABRT, SIGSEGV or SIGSYS no longer ends it
// before its sealed result (before, Go's runtime died of the first: exit
// 2, no envelope), and a SIGTERM (docker stop: a cancel) with FIFOs
// planted in the out dir still ends with the sealed 143.
func TestSealedRunnerAsPID1(t *testing.T) {
	needPython(t)
	t.Run("signals from inside", func(t *testing.T) {
		r := startPID1(t, pyJob(payload.ModeTest, killPID1Py, ""), func(string) {}, false)
		code, c := r.wait(t, time.Minute)
		if code != exitcode.OK || !bytes.Contains(c.Result, []byte(`"passed": true`)) {
			t.Fatalf("exit %d, sealed result:\n%s\n%s", code, c.Result, r.stderr.String())
		}
		for _, want := range []string{"ignored hangup sent to PID 1", "ignored quit sent to PID 1", "ignored aborted sent to PID 1"} {
			if !strings.Contains(r.stderr.String(), want) {
				t.Errorf("the log lacks %q:\n%s", want, r.stderr.String())
			}
		}
	})
	t.Run("SIGTERM with FIFOs in the out dir", func(t *testing.T) {
		r := startPID1(t, example(t, "vectoradd", "hang", payload.ModeLeaderboard), plantFIFOs(t), false)
		pid := r.runner(t)
		time.Sleep(2 * time.Second)
		if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		code, c := r.wait(t, 30*time.Second)
		if code != exitcode.Canceled || !bytes.Contains(c.Result, []byte("received terminated")) {
			t.Fatalf("exit %d, sealed result:\n%s\n%s", code, c.Result, r.stderr.String())
		}
	})
	// A full tmpfs of the job's own is the submission's doing: exit 1,
	// not 75 (before: "disk full", the machine's fault, run again
	// elsewhere).
	t.Run("the submission fills its own tmpfs", func(t *testing.T) {
		r := startPID1(t, pyJob(payload.ModeLeaderboard, fillWorkPy, ""), func(string) {}, true)
		code, c := r.wait(t, time.Minute)
		if code != exitcode.Failure || !bytes.Contains(c.Result, []byte("no space left on device")) || !strings.Contains(r.stderr.String(), "the job filled its own disk") {
			t.Fatalf("exit %d, sealed result:\n%s\n%s", code, c.Result, r.stderr.String())
		}
	})
}
