package exitcode

import (
	"errors"
	"fmt"
)

// Error is an error that says which exit code the process ends with. A
// package that knows what its failure means to a caller (bad input: Usage;
// a bad job: BadJob) returns one, so the CLI maps every error to a code
// in one place (Of) instead of each command guessing from the message.
type Error struct {
	Code int
	// Err is what to print; nil for a silent exit (the command already
	// said what it had to).
	Err error
}

// Error is the inner error's message; a silent exit says only its code
// (the CLI never prints it, but a wrapper or a log might).
func (e *Error) Error() string {
	if e.Err == nil {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Err.Error()
}

func (e *Error) Unwrap() error { return e.Err }

// ExitCode makes *Error a Coder.
func (e *Error) ExitCode() int { return e.Code }

// With attaches code to err; nil stays nil.
func With(code int, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Code: code, Err: err}
}

// Usagef is a bad-input error (exit 2) with a formatted message.
func Usagef(format string, args ...any) error {
	return &Error{Code: Usage, Err: fmt.Errorf(format, args...)}
}

// Exit ends with code, saying err when there is one: a command whose
// package already logged the details returns its outcome's code this
// way. OK is nil whatever err.
func Exit(code int, err error) error {
	switch {
	case code == OK:
		return nil
	case err == nil:
		return Silent(code)
	}
	return With(code, err)
}

// Silent ends with code and prints nothing more.
func Silent(code int) error { return &Error{Code: code} }

// Coder is an error type that knows its exit code (an *Error, or a
// package's own typed error such as node.InputError).
type Coder interface {
	error
	ExitCode() int
}

// Of is the exit code err ends the process with: the outermost Coder in
// its chain decides; any other error is a Failure, nil is OK.
func Of(err error) int {
	if err == nil {
		return OK
	}
	if c, ok := errors.AsType[Coder](err); ok {
		return c.ExitCode()
	}
	return Failure
}

// IsUsage reports whether err ends the process with Usage: the caller's
// mistake (bad flags, an unreadable payload file, no or an unknown
// queue), not the job's or the machine's.
func IsUsage(err error) bool { return Of(err) == Usage }

// Message is what to print for err: the text of the error it carries, or
// "" for a silent exit.
func Message(err error) string {
	var e *Error
	if errors.As(err, &e) && e.Err == nil {
		return ""
	}
	return err.Error()
}
