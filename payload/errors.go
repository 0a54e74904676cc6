package payload

import (
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// ErrorKind names what is wrong with a job, so callers can tell a transport
// problem (not base64, not zlib) from a schema problem without parsing text.
type ErrorKind string

const (
	KindNotBase64    ErrorKind = "not-base64"
	KindNotZlib      ErrorKind = "not-zlib"
	KindNotJSON      ErrorKind = "not-json"
	KindTooLarge     ErrorKind = "too-large"
	KindTooDeep      ErrorKind = "too-deep"
	KindMissingField ErrorKind = "missing-field"
	KindInvalidField ErrorKind = "invalid-field"
	KindUnsafePath   ErrorKind = "unsafe-path"
	KindEmptySources ErrorKind = "empty-sources"
	KindChecksum     ErrorKind = "checksum"
	KindNoPayload    ErrorKind = "no-payload"
)

// Error is a job that cannot be run. Its message is one line that names the
// problem; every Error maps to exitcode.BadJob in the CLI.
type Error struct {
	Kind  ErrorKind
	Field string // the config key at fault, when there is one
	Msg   string
	Err   error
}

func (e *Error) Error() string {
	msg := "invalid job: "
	if e.Field != "" {
		msg += fmt.Sprintf("%s: ", e.Field)
	}
	msg += e.Msg
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode is why a job error ends a command with 65 (exitcode.Coder):
// the job, not the machine, is wrong, and Buildkite never retries it.
func (e *Error) ExitCode() int { return exitcode.BadJob }

// IsJobError reports whether err (or anything it wraps) is a job error.
func IsJobError(err error) bool {
	var e *Error
	return errors.As(err, &e)
}

func errorf(kind ErrorKind, field, format string, args ...any) *Error {
	return &Error{Kind: kind, Field: field, Msg: fmt.Sprintf(format, args...)}
}
