package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/syncbuf"
)

// Exit codes of the evaluated program, Kernelbot's ExitCode.
const (
	ExitSuccess      = 0
	ExitCUDAFail     = 110
	ExitPipeFailed   = 111
	ExitValidateFail = 112
	ExitTestSpec     = 113
	ExitTimeout      = 114
)

// popcornFD is the descriptor number the verdict pipe has in the child:
// the first of exec.Cmd.ExtraFiles.
const popcornFD = 3

// maxVerdictBytes bounds what the runner reads from the verdict pipe.
// Profile reports travel through it, base64-encoded, so it is generous.
const maxVerdictBytes = 64 << 20

// drainGrace is how long the runner keeps reading stdout, stderr and the
// verdict pipe after the harness and every descendant are dead. Only a
// process outside the tree could still hold a write end; it gets this
// long, then its writes are lost.
const drainGrace = 2 * time.Second

// program is one process the runner starts.
type program struct {
	Args    []string
	Dir     string
	Env     []string
	Timeout time.Duration
	Verdict bool // give it the POPCORN_FD pipe
}

// outcome is what happened to a program.
type outcome struct {
	ExitCode int // Python's returncode: -N for a signal
	Stdout   string
	Stderr   string
	Verdict  []byte
	Duration time.Duration
	TimedOut bool
	Canceled bool
}

// run starts p, waits for it to exit, time out or be cancelled, kills every
// descendant it left behind, and drains its output. An error means the
// program could not be started at all.
func (p program) run(ctx context.Context) (*outcome, error) {
	becomeSubreaper()
	// Programs are found on the PATH the program itself will see.
	path := p.Args[0]
	if !strings.Contains(path, "/") {
		found, err := lookPathIn(path, p.Env)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		path = found
	}
	cmd := exec.Command(path, p.Args[1:]...)
	cmd.Args[0] = p.Args[0]
	cmd.Dir = p.Dir
	cmd.Env = p.Env
	// Its own process group, so one kill reaches everything that did not
	// call setsid; the subreaper sweep catches the rest. Pdeathsig ends
	// it if the runner dies first.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}

	var closeAfterStart, closeAfterDrain []*os.File
	defer func() {
		for _, f := range append(closeAfterStart, closeAfterDrain...) {
			f.Close()
		}
	}()
	pipe := func() (*os.File, *os.File, error) {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, nil, err
		}
		closeAfterStart = append(closeAfterStart, w)
		closeAfterDrain = append(closeAfterDrain, r)
		return r, w, nil
	}
	var stdout, stderr capture
	verdict := syncbuf.Buffer{Max: maxVerdictBytes}
	type stream struct {
		r *os.File
		w io.Writer
	}
	var streams []stream
	outR, outW, err := pipe()
	if err != nil {
		return nil, err
	}
	errR, errW, err := pipe()
	if err != nil {
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = outW, errW
	streams = append(streams, stream{outR, &stdout}, stream{errR, &stderr})
	if p.Verdict {
		vr, vw, err := pipe()
		if err != nil {
			return nil, err
		}
		cmd.ExtraFiles = []*os.File{vw}
		cmd.Env = append(withoutKey(cmd.Env, "POPCORN_FD"), "POPCORN_FD="+strconv.Itoa(popcornFD))
		streams = append(streams, stream{vr, &verdict})
	}

	start := time.Now()
	if err := startManaged(cmd); err != nil {
		return nil, err
	}
	pid := cmd.Process.Pid
	// The runner keeps no write end: once every process holding one is
	// gone, the readers see EOF.
	for _, f := range closeAfterStart {
		f.Close()
	}
	closeAfterStart = nil

	var readers sync.WaitGroup
	for _, s := range streams {
		readers.Add(1)
		go func() {
			defer readers.Done()
			_, _ = io.Copy(s.w, s.r)
		}()
	}

	waited := make(chan *os.ProcessState, 1)
	go func() {
		_ = cmd.Wait()
		forgetManaged(pid)
		waited <- cmd.ProcessState
	}()

	out := &outcome{}
	var timer <-chan time.Time
	if p.Timeout > 0 {
		t := time.NewTimer(p.Timeout)
		defer t.Stop()
		timer = t.C
	}
	var state *os.ProcessState
	select {
	case state = <-waited:
		out.Duration = time.Since(start)
	case <-timer:
		out.TimedOut = true
	case <-ctx.Done():
		out.Canceled = true
	}
	if state == nil {
		out.Duration = time.Since(start)
		killTree(pid, pid)
		state = <-waited
	}
	// The harness is gone: whatever it or its helpers left running is
	// killed before the pipes are drained, so a leftover process can
	// neither hold the runner open nor add to the verdict afterwards.
	sweep(pid)

	drained := make(chan struct{})
	go func() { readers.Wait(); close(drained) }()
	select {
	case <-drained:
	case <-time.After(drainGrace):
		for _, s := range streams {
			_ = s.r.SetReadDeadline(time.Now())
		}
		<-drained
	}

	out.ExitCode = exitCode(state)
	out.Stdout, out.Stderr = stdout.Text(), stderr.Text()
	out.Verdict = verdict.Bytes()
	return out, nil
}

// exitCode is Python's Popen.returncode: the exit status, or minus the
// signal number for a process killed by a signal.
func exitCode(state *os.ProcessState) int {
	if state == nil {
		return -1
	}
	if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return -int(ws.Signal())
	}
	return state.ExitCode()
}

func withoutKey(env []string, key string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if k, _, _ := strings.Cut(kv, "="); k != key {
			out = append(out, kv)
		}
	}
	return out
}

// isNotFound reports whether a start error means the program does not exist.
func isNotFound(err error) bool {
	return errors.Is(err, exec.ErrNotFound) || errors.Is(err, os.ErrNotExist)
}
