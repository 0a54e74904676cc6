package runner

import (
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"syscall"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
)

// Fault says whose fault a runner failure is; the CLI turns it into an
// exit code the retry rules understand.
type Fault int

const (
	// FaultInternal: a bug or an unexpected error in the runner.
	FaultInternal Fault = iota
	// FaultJob: the job cannot run anywhere (bad payload, missing include
	// directory). Never retried.
	FaultJob
	// FaultMachine: this machine cannot run it (no GPU visible, a GPU
	// runtime failure the runner's own probe confirms, disk full, missing
	// interpreter). Retried elsewhere.
	FaultMachine
	// FaultCanceled: the runner was told to stop (SIGTERM).
	FaultCanceled
	// FaultUsage: the caller's options are wrong (an unreadable job or
	// --system file); nothing about the job or the machine is known.
	FaultUsage
	// FaultSubmission: the submission broke the evaluation from inside
	// (it filled its own container's disk). Exit 1 and never retried, as
	// the sandbox ends a job whose runner was killed from inside.
	FaultSubmission
)

// Error is a runner failure with its fault.
type Error struct {
	Fault Fault
	Err   error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// FaultOf classifies err: job errors, jobsource usage errors, ENOSPC and
// *Error are recognised.
func FaultOf(err error) Fault {
	var re *Error
	switch {
	case errors.As(err, &re):
		return re.Fault
	case exitcode.IsUsage(err):
		return FaultUsage
	case payload.IsJobError(err):
		return FaultJob
	case isDiskFull(err):
		return FaultMachine
	}
	return FaultInternal
}

func isDiskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// tmpfsMagic is TMPFS_MAGIC (<linux/magic.h>), statfs(2)'s f_type.
const tmpfsMagic = 0x01021994

// diskFullOnTmpfs reports whether err is ENOSPC or EDQUOT on a path of a
// tmpfs. In the sandbox's container every tmpfs the runner writes to (the
// work dir, /tmp, the out dir) is the job's own, bounded in size and
// inodes, and the submission fills it as easily as the runner can: a full
// one is no evidence against the machine (issue 25: what the submission
// can cause must not re-roll it elsewhere).
func diskFullOnTmpfs(err error) bool {
	var pe *fs.PathError
	if !isDiskFull(err) || !errors.As(err, &pe) {
		return false
	}
	for dir := pe.Path; ; dir = filepath.Dir(dir) {
		var st syscall.Statfs_t
		if syscall.Statfs(dir, &st) == nil {
			return st.Type == tmpfsMagic
		}
		if dir == filepath.Dir(dir) {
			return false
		}
	}
}

func usageFault(format string, args ...any) error {
	return &Error{Fault: FaultUsage, Err: fmt.Errorf(format, args...)}
}

func machineFault(format string, args ...any) error {
	return &Error{Fault: FaultMachine, Err: fmt.Errorf(format, args...)}
}

// ExitCode is the exit code of a failure with this fault, from the one
// table (internal/exitcode; docs/formats.md#runner-exit-codes).
func (f Fault) ExitCode() int {
	switch f {
	case FaultUsage:
		return exitcode.Usage
	case FaultJob:
		return exitcode.BadJob
	case FaultMachine:
		return exitcode.TempFail
	case FaultCanceled:
		return exitcode.Canceled
	}
	// FaultInternal, and FaultSubmission: the sandbox ends a job whose
	// runner was killed from inside with 1 too.
	return exitcode.Failure
}

// ExitCode makes *Error an exitcode.Coder: the CLI asks exitcode.Of, as
// for every other command.
func (e *Error) ExitCode() int { return e.Fault.ExitCode() }

// withFault is err as the runner returns it to the CLI: an *Error whose
// fault FaultOf decides, so exitcode.Of reads the code from the error
// itself (a disk-full or job error carries none of its own). nil stays nil.
func withFault(err error) error {
	if err == nil {
		return nil
	}
	if e, ok := err.(*Error); ok {
		return e
	}
	return &Error{Fault: FaultOf(err), Err: err}
}
