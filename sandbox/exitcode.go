package sandbox

import (
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/signing"
)

// withCode attaches kbgen sandbox's exit code to an error of NewJob,
// Job.Run or Readmit (exitcode.Of reads it, once, in the CLI).
func withCode(err error) error {
	if err == nil {
		return nil
	}
	return exitcode.With(codeOf(err), err)
}

// codeOf is kbgen sandbox's exit code for err: a refusal is this
// agent's (75, retried elsewhere), a bad plugin config the step's (2), a
// re-routed or tampered step or a bad payload the job's (65).
func codeOf(err error) int {
	switch {
	case err == nil:
		return exitcode.OK
	case refusal.IsRefused(err):
		return exitcode.TempFail
	case refusal.IsConfigError(err):
		return exitcode.Usage
	case errors.As(err, new(*signing.MisroutedError)), errors.As(err, new(*signing.StepSignatureError)), payload.IsJobError(err):
		return exitcode.BadJob
	}
	return exitcode.Failure
}

// Exit is the exit code of a run that finished, and why it is not the
// container's own when it is not: docker could not run the container or
// the host could not write the vouched result (75: the machine's fault),
// the host saw external noise that earns a ranked run its one retry
// (75, noise.json says so: the runner decided before that evidence
// existed), or `kbgen run` left no result the sandbox could verify (then
// 0 and every code the step's retry rule retries, exitcode.InfraRetryCodes,
// become 1: a job whose runner was killed or silenced from inside has
// failed, and is not retried elsewhere; other codes, such as 137, stand).
func (o Outcome) Exit() (int, error) {
	unverified := o.Vouch != nil && !o.Vouch.Verified
	switch {
	case o.Code == DockerExitInfra:
		return exitcode.TempFail, fmt.Errorf("docker could not run the container (exit %d, see docker's message above)", o.Code)
	case unverified && (o.Code == exitcode.OK || exitcode.IsInfraRetry(o.Code)):
		return exitcode.Failure, errors.New(o.Vouch.Reason)
	case o.Code != 0:
		return o.Code, nil
	case o.WriteErr != nil:
		return exitcode.TempFail, o.WriteErr
	case o.HostRetry:
		return exitcode.TempFail, fmt.Errorf("external noise seen from the host (%s retry): exit 75 so Buildkite runs the job again on another agent", contract.NoiseFile)
	}
	return exitcode.OK, nil
}
