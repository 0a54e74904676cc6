package client

import "github.com/gpu-mode/kbgen/internal/exitcode"

// ExitCode is the exit code of kbgen submit, wait and result (and the
// "exit" of kbgen serve's done event) for a submission that ended so.
func (s Status) ExitCode() int {
	switch s {
	case Obtained:
		return exitcode.OK
	case RunnerFailed:
		return exitcode.RunnerFailed
	case Infra:
		return exitcode.Infra
	case TimedOut:
		return exitcode.Timeout
	}
	return exitcode.Failure
}
