package nvmlhelper

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/internal/syncbuf"
)

// DefaultTimeout bounds the helper's hello (loading NVML) and each reply.
// A hung driver then costs the job this once: the helper is killed and the
// caller falls back to nvidia-smi, which has its own bound.
const DefaultTimeout = 5 * time.Second

// maxReply bounds one reply line: an inventory of 64 GPUs with MIG is
// a few tens of KB.
const maxReply = 4 << 20

// Helper is a running kbgen-nvml. Its methods are safe for concurrent use;
// requests are answered one at a time. After any failure it is closed and
// every later call returns that failure, so callers fall back once.
type Helper struct {
	mu      sync.Mutex
	cmd     *exec.Cmd
	in      *os.File
	out     *os.File
	r       *bufio.Reader
	stderr  *syncbuf.Buffer
	timeout time.Duration
	// sup, when set, started the process and is told when it is reaped.
	sup Supervisor
	// exited closes when the helper has been reaped; waitErr is then how
	// it ended.
	exited  chan struct{}
	waitErr error
	// Driver is the driver version the helper's NVML reported.
	Driver string
	err    error
}

// Start runs the helper at path with env and waits for its hello; timeout
// 0 is DefaultTimeout. The helper lives until Close.
func Start(path string, env []string, timeout time.Duration) (*Helper, error) {
	h, err := Launch(path, env, timeout)
	if err != nil {
		return nil, err
	}
	if err := h.Ready(); err != nil {
		return nil, err
	}
	return h, nil
}

// Supervisor starts the helper's process for a caller that keeps account
// of its children: the runner kills every child of its own it did not
// start itself after each harness (runner/reaper.go), so the helper must
// be one it started, and forgotten once reaped (its pid may be reused).
type Supervisor interface {
	// Start starts cmd (exec.Cmd.Start) and records its pid.
	Start(cmd *exec.Cmd) error
	// Reaped says that pid has been waited for.
	Reaped(pid int)
}

// Launch execs the helper and returns without waiting for NVML to load:
// the caller decides when to wait (Ready), so loading overlaps its own
// work while the exec itself is done before Launch returns.
func Launch(path string, env []string, timeout time.Duration) (*Helper, error) {
	return LaunchSupervised(path, env, timeout, nil)
}

// LaunchSupervised is Launch with the process started through sup (nil:
// exec.Cmd.Start), so that a caller sweeping its leftover children
// spares the helper for as long as the job lives.
func LaunchSupervised(path string, env []string, timeout time.Duration, sup Supervisor) (*Helper, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	h := &Helper{timeout: timeout, stderr: &syncbuf.Buffer{Max: 4096}, sup: sup}
	if err := h.start(path, env); err != nil {
		return nil, err
	}
	return h, nil
}

// Ready waits for the hello of a launched helper: nil once NVML has
// loaded, else why not (and the helper is closed).
func (h *Helper) Ready() error {
	var hello Reply
	if err := h.read(&hello); err != nil {
		return h.fail(fmt.Errorf("kbgen-nvml did not start: %w", err))
	}
	if hello.Error != "" {
		return h.fail(&ReplyError{Msg: hello.Error})
	}
	if hello.Protocol != Protocol {
		return h.fail(&ProtocolError{Helper: hello.Protocol})
	}
	h.Driver = hello.Driver
	return nil
}

// start execs the helper with its stdin and stdout on pipes whose read
// side supports deadlines.
func (h *Helper) start(path string, env []string) error {
	inR, inW, err := os.Pipe()
	if err != nil {
		return err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return err
	}
	h.cmd = exec.Command(path)
	h.cmd.Env = env
	// A child of the helper still holding its stderr must not keep Wait
	// (and so the job) waiting once the helper itself is gone.
	h.cmd.WaitDelay = h.timeout
	h.cmd.Stdin, h.cmd.Stdout, h.cmd.Stderr = inR, outW, h.stderr
	if h.sup != nil {
		err = h.sup.Start(h.cmd)
	} else {
		err = h.cmd.Start()
	}
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return fmt.Errorf("starting kbgen-nvml: %w", err)
	}
	h.in, h.out, h.r = inW, outR, bufio.NewReaderSize(outR, 64<<10)
	h.exited = make(chan struct{})
	go func() {
		h.waitErr = h.cmd.Wait()
		if h.sup != nil {
			h.sup.Reaped(h.cmd.Process.Pid)
		}
		close(h.exited)
	}()
	return nil
}

// Sample reads gpus (UUIDs or indexes; none: every visible GPU).
func (h *Helper) Sample(gpus ...string) ([]Sample, error) {
	rep, err := h.call(Request{Op: OpSample, GPUs: gpus})
	if err != nil {
		return nil, err
	}
	return rep.Samples, nil
}

// Inventory lists the GPUs, their MIG instances and their links.
func (h *Helper) Inventory() (*Inventory, error) {
	rep, err := h.call(Request{Op: OpInventory})
	if err != nil {
		return nil, err
	}
	if rep.Inventory == nil {
		return nil, errors.New("kbgen-nvml answered an inventory request without one")
	}
	return rep.Inventory, nil
}

// call sends one request and reads its reply. An error the helper
// reports (a GPU it cannot find) leaves it running; a broken exchange
// closes it.
func (h *Helper) call(req Request) (Reply, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return Reply{}, h.err
	}
	line, err := json.Marshal(req)
	if err != nil {
		return Reply{}, err
	}
	err = h.in.SetWriteDeadline(time.Now().Add(h.timeout))
	if err == nil {
		_, err = h.in.Write(append(line, '\n'))
	}
	if err != nil {
		// A helper that died shows why on its stderr.
		return Reply{}, h.failLocked(fmt.Errorf("kbgen-nvml: writing a request: %w", h.exitError(err)))
	}
	var rep Reply
	if err := h.read(&rep); err != nil {
		return Reply{}, h.failLocked(fmt.Errorf("kbgen-nvml: %w", err))
	}
	if rep.Error != "" {
		return Reply{}, &ReplyError{Msg: rep.Error}
	}
	return rep, nil
}

// read decodes the next reply line within the timeout.
func (h *Helper) read(rep *Reply) error {
	if err := h.out.SetReadDeadline(time.Now().Add(h.timeout)); err != nil {
		return err
	}
	var line []byte
	for {
		chunk, isPrefix, err := h.r.ReadLine()
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return &NoReplyError{Timeout: h.timeout}
			}
			return h.exitError(err)
		}
		line = append(line, chunk...)
		if len(line) > maxReply {
			return fmt.Errorf("a reply longer than %d bytes", maxReply)
		}
		if !isPrefix {
			break
		}
	}
	if err := json.Unmarshal(line, rep); err != nil {
		return fmt.Errorf("unreadable reply %.80q: %w", line, err)
	}
	return nil
}

// exitError explains a closed stdout by how the helper ended (a loader
// error such as a missing libc version is on its stderr).
func (h *Helper) exitError(readErr error) error {
	select {
	case <-h.exited:
		return &ExitError{Wait: h.waitErr, Stderr: firstLine(h.stderr.String())}
	case <-time.After(h.timeout):
		return readErr
	}
}

// Close ends the helper: its stdin closes, it exits, and it is reaped.
func (h *Helper) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err == nil {
		h.err = errors.New("kbgen-nvml: closed")
	}
	return h.stop()
}

// fail closes the helper after a broken exchange and keeps the reason.
func (h *Helper) fail(err error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.failLocked(err)
}

func (h *Helper) failLocked(err error) error {
	h.err = err
	_ = h.stop()
	return err
}

// stop closes the pipes and reaps the helper (closing its stdin ends
// it), killing it when it does not leave within the timeout.
func (h *Helper) stop() error {
	if h.in != nil {
		h.in.Close()
		h.in = nil
	}
	if h.out != nil {
		h.out.Close()
		h.out = nil
	}
	if h.exited == nil {
		return nil
	}
	select {
	case <-h.exited:
		return h.waitErr
	case <-time.After(h.timeout):
		_ = h.cmd.Process.Kill()
	}
	// A helper stuck in the driver (an uninterruptible ioctl) may not die
	// even of SIGKILL: give up on it rather than hang the job; the
	// container's end takes it.
	select {
	case <-h.exited:
		return h.waitErr
	case <-time.After(h.timeout):
		h.exited = nil
		return fmt.Errorf("kbgen-nvml (pid %d) did not exit %v after SIGKILL; left behind", h.cmd.Process.Pid, h.timeout)
	}
}

func firstLine(s string) string {
	line, _, _ := bytes.Cut([]byte(s), []byte("\n"))
	return string(bytes.TrimSpace(line))
}
