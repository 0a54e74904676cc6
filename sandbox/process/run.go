package process

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// IO is what the step is connected to: its stdin (the key), stdout (the
// envelope) and stderr (the inert job log), the signals to forward, the
// grace period after the first, and where the launcher's own notes go.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Signals        <-chan os.Signal
	// StopTimeout is the grace period between SIGTERM and SIGKILL.
	StopTimeout time.Duration
	// Logf receives the launcher's notes; nil discards them.
	Logf func(format string, args ...any)
}

func (l IO) logf(format string, args ...any) {
	if l.Logf != nil {
		l.Logf(format, args...)
	}
}

// processWaitDelay bounds how long the launcher waits for the step's
// output pipes after the step exited: a process it left behind may hold
// them, and is killed next.
const processWaitDelay = time.Second

// Run is the process launcher: the step (`kbgen run --sealed`) as
// p.UID, started by a root sandbox holding only CAP_SETUID, CAP_SETGID and
// CAP_KILL. The step gets: fresh pipes for stdin (the key), stdout (the
// envelope) and stderr (the inert job log), and no other descriptor; its
// own session (no controlling terminal, out of the job's process group);
// the environment p.Env alone; no capabilities (a uid change clears the
// permitted, effective and ambient sets, and no_new_privs keeps exec from
// giving any back); no core dumps; SIGKILL when the sandbox dies. p.Protect
// becomes root's alone first. After it exits, every process of p.UID left
// in this PID namespace is killed, so nothing of the submission outlives
// it to race the publish. The exit code is docker run's shape: 128+n for
// signal n.
func Run(ctx context.Context, p *Spec, l IO) (int, error) {
	if os.Geteuid() != 0 {
		return 0, refusal.Refusef("the process launcher starts the step as uid %d and so runs as root (with CAP_SETUID, CAP_SETGID and CAP_KILL); it runs as uid %d", p.UID, os.Geteuid())
	}
	if p.UID == 0 || p.GID == 0 {
		return 0, refusal.Refusef("the process launcher never runs the step as root's uid or gid")
	}
	if err := ProtectDirs(p.Protect); err != nil {
		return 0, err
	}
	if err := stickDirs(p.Sticky); err != nil {
		return 0, err
	}
	// A crashing submission must not hand the node's core handler a dump
	// (core_pattern is the host's, often a pipe outside the pod).
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &syscall.Rlimit{}); err != nil {
		return 0, refusal.Refusef("setting RLIMIT_CORE to 0: %v", err)
	}
	cmd := exec.Command(p.Argv[0], p.Argv[1:]...)
	cmd.Env, cmd.Dir = p.Env, p.Dir
	cmd.Stdin, cmd.Stdout, cmd.Stderr = l.Stdin, l.Stdout, l.Stderr
	cmd.WaitDelay = processWaitDelay
	groups := make([]uint32, len(p.Groups))
	for i, g := range p.Groups {
		groups[i] = uint32(g)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
		Credential: &syscall.Credential{Uid: uint32(p.UID), Gid: uint32(p.GID), Groups: groups},
	}
	started, done := make(chan error, 1), make(chan error, 1)
	go startNoNewPrivs(cmd, started, done)
	if err := <-started; err != nil {
		return 0, refusal.Refusef("starting %s as uid %d: %v", p.Argv[0], p.UID, err)
	}
	code, err := supervise(ctx, cmd, done, l)
	if n := killUser("/proc", p.UID); n > 0 {
		l.logf("kbgen sandbox: killed %d process(es) of uid %d left behind by the step", n, p.UID)
	}
	return code, err
}

// startNoNewPrivs starts cmd from a thread that has no_new_privs set, so
// the child has it from its first instruction (Go's SysProcAttr has no
// such field; the pod's allowPrivilegeEscalation: false sets it for the
// whole container, and this holds without it). The thread is never
// unlocked: it dies with this goroutine, after the child, whose
// parent-death signal is tied to it.
func startNoNewPrivs(cmd *exec.Cmd, started, done chan<- error) {
	runtime.LockOSThread()
	if _, _, e := syscall.RawSyscall6(syscall.SYS_PRCTL, prSetNoNewPrivs, 1, 0, 0, 0, 0); e != 0 {
		started <- fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %v", e)
		return
	}
	if err := cmd.Start(); err != nil {
		started <- err
		return
	}
	started <- nil
	done <- cmd.Wait()
}

// prSetNoNewPrivs is PR_SET_NO_NEW_PRIVS from <linux/prctl.h>.
const prSetNoNewPrivs = 38

// supervise waits for the step, forwarding signals as the docker
// launcher does: the first SIGTERMs its process group (the runner then
// seals a cancelled result) and SIGKILLs it after StopTimeout, a second
// kills it at once, as does ctx ending.
func supervise(ctx context.Context, cmd *exec.Cmd, done <-chan error, l IO) (int, error) {
	pgid := cmd.Process.Pid // Setsid: the step leads its own group
	var grace <-chan time.Time
	ctxDone := ctx.Done()
	kill := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }
	for stopped := false; ; {
		select {
		case err := <-done:
			return processExit(cmd, err)
		case <-ctxDone:
			ctxDone = nil
			kill()
		case <-grace:
			l.logf("kbgen sandbox: the step did not stop within %v: killing it", l.StopTimeout)
			kill()
		case sig := <-l.Signals:
			if stopped {
				l.logf("kbgen sandbox: %v again: killing the step", sig)
				kill()
				continue
			}
			stopped = true
			l.logf("kbgen sandbox: %v: stopping the step (pid %d)", sig, pgid)
			_ = syscall.Kill(-pgid, syscall.SIGTERM)
			grace = time.After(l.StopTimeout)
		}
	}
}

// processExit is the step's exit code; a pipe still held by a process it
// left behind (exec.ErrWaitDelay) does not change it.
func processExit(cmd *exec.Cmd, err error) (int, error) {
	if err != nil && !errors.Is(err, exec.ErrWaitDelay) {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			return 0, fmt.Errorf("waiting for the step: %w", err)
		}
	}
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return cmd.ProcessState.ExitCode(), nil
}

// ProtectDirs makes each existing directory root's alone (0700), so a
// process of another uid can neither reach nor change what is in it.
// It must be root's already: one the step's user owns it could chmod
// back (agent-stack-k8s chowns /workspace to a pod-level runAsUser).
func ProtectDirs(dirs []string) error {
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return refusal.Refusef("protecting %s: %v", d, err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case !fi.IsDir():
			return refusal.Refusef("protecting %s: not a directory", d)
		case !ok || st.Uid != 0:
			return refusal.Refusef("protecting %s: it belongs to uid %d, not root, so the step's user could undo it (does the pod set securityContext.runAsUser or fsGroup? agent-stack-k8s then chowns its workspace to that user)", d, st.Uid)
		}
		if err := os.Chmod(d, 0o700); err != nil {
			return refusal.Refusef("protecting %s: %v", d, err)
		}
	}
	return nil
}

// stickDirs adds the sticky bit to each existing directory that is root's
// and writable by others without it, as /tmp is on a host.
func stickDirs(dirs []string) error {
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || st.Uid != 0 || fi.Mode().Perm()&0o002 == 0 || fi.Mode()&os.ModeSticky != 0 {
			continue
		}
		if err := os.Chmod(d, fi.Mode().Perm()|os.ModeSticky); err != nil {
			return refusal.Refusef("making %s sticky: %v", d, err)
		}
	}
	return nil
}

// CheckPrivateDir refuses a directory that a process of another uid
// could change or swap: it and every directory above it must be root's
// and not writable by group or others, unless sticky (like /tmp: then
// only the owner of an entry may rename it, and the entry is checked).
func CheckPrivateDir(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return refusal.Refusef("results directory: %v", err)
	}
	for p := abs; ; p = filepath.Dir(p) {
		fi, err := os.Lstat(p)
		if err != nil {
			return refusal.Refusef("results directory: %v", err)
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		switch {
		case !fi.IsDir():
			return refusal.Refusef("results directory %s: %s is not a directory", abs, p)
		case !ok || st.Uid != 0:
			return refusal.Refusef("results directory %s: %s belongs to uid %d, not root: the step could swap it", abs, p, st.Uid)
		case fi.Mode().Perm()&0o022 != 0 && (p == abs || fi.Mode()&os.ModeSticky == 0):
			return refusal.Refusef("results directory %s: %s is writable by others (%v): the step could swap it", abs, p, fi.Mode().Perm())
		}
		if p == "/" {
			return nil
		}
	}
}

// killUser SIGKILLs every live process whose real uid is uid, in the PID
// namespace procRoot shows (the pod's), until none is left (one may fork
// while it looks), and says how many it killed.
func killUser(procRoot string, uid int) int {
	killed := 0
	for round := 0; round < 100; round++ {
		pids := Processes(procRoot, uid)
		if len(pids) == 0 {
			return killed
		}
		for _, pid := range pids {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				killed++
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	return killed
}

// Processes lists the live (not zombie) processes of real uid uid.
func Processes(procRoot string, uid int) []int {
	ents, _ := os.ReadDir(procRoot)
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ruid, state, ok := procStatus(filepath.Join(procRoot, e.Name(), "status")); ok && ruid == uid && state != "Z" && state != "X" {
			pids = append(pids, pid)
		}
	}
	return pids
}

// procStatus reads the real uid and the state letter of /proc/PID/status.
func procStatus(path string) (ruid int, state string, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return 0, "", false
	}
	defer f.Close()
	ruid = -1
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), ":")
		fields := strings.Fields(v)
		switch {
		case k == "State" && len(fields) > 0:
			state = fields[0]
		case k == "Uid" && len(fields) > 0:
			ruid, _ = strconv.Atoi(fields[0])
		}
	}
	return ruid, state, ruid >= 0
}
