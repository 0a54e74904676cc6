package nvmlhelper

import (
	"fmt"
	"time"
)

// ReplyError is an error kbgen-nvml reported itself (NVML did not load,
// a GPU it cannot find): in a reply, the helper goes on serving; in its
// hello, it did not start. Msg is its text, NVML's return code named.
type ReplyError struct{ Msg string }

func (e *ReplyError) Error() string { return "kbgen-nvml: " + e.Msg }

// ProtocolError is a kbgen-nvml of another release: it speaks protocol
// Helper, not this kbgen's Protocol.
type ProtocolError struct{ Helper int }

func (e *ProtocolError) Error() string {
	return fmt.Sprintf("kbgen-nvml speaks protocol %d, this kbgen %d: install the kbgen-nvml of kbgen's release", e.Helper, Protocol)
}

// NoReplyError is a helper silent for its whole timeout (stuck in the
// driver): it is closed, and the caller falls back.
type NoReplyError struct{ Timeout time.Duration }

func (e *NoReplyError) Error() string { return fmt.Sprintf("no reply within %v", e.Timeout) }

// ExitError is a helper that exited instead of replying (a crash, a
// loader error): Wait is how it ended, Stderr the first line it wrote
// there ("" when none).
type ExitError struct {
	Wait   error
	Stderr string
}

func (e *ExitError) Error() string {
	if e.Stderr != "" {
		return fmt.Sprintf("exited (%v): %s", e.Wait, e.Stderr)
	}
	return fmt.Sprintf("exited (%v) before replying", e.Wait)
}

func (e *ExitError) Unwrap() error { return e.Wait }
