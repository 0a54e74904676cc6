package sandbox

import (
	"errors"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/signing"
)

// TestExitCode: kbgen sandbox's exit codes, which the eval step's retry
// rules branch on (docs/formats.md#exit-codes).
func TestExitCode(t *testing.T) {
	t.Parallel()
	_, jobErr := payload.ParseInput([]byte("%%%%"))
	for _, tc := range []struct {
		name string
		err  error
		code int
	}{
		{"none", nil, 0},
		{"refused", refusal.Refusef("no GPU placement"), 75},
		{"plugin config", &refusal.ConfigError{Msg: "unknown key"}, 2},
		{"re-routed step", &signing.MisroutedError{}, 65},
		{"bad payload", jobErr, 65},
		{"other", errors.New("a bug"), 1},
	} {
		if got := exitcode.Of(withCode(tc.err)); got != tc.code {
			t.Errorf("%s: exitcode.Of(withCode(%v)) = %d, want %d", tc.name, tc.err, got, tc.code)
		}
	}
}

// TestOutcomeExit: the container's code stands, except docker's own
// failure and a vouched result the host could not write (75, retried),
// and a run with no verifiable result, which never passes or retries.
func TestOutcomeExit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		out     Outcome
		code    int
		message bool
	}{
		{"passed", Outcome{}, 0, false},
		{"the runner's code", Outcome{Code: 65}, 65, false},
		{"docker failed", Outcome{Code: DockerExitInfra}, 75, true},
		{"vouched result not written", Outcome{WriteErr: errors.New("disk full")}, 75, true},
		{"runner code beats a write failure", Outcome{Code: 143, WriteErr: errors.New("x")}, 143, false},
		{"verified result", Outcome{Vouch: &Vouch{Verified: true}}, 0, false},
		{"verified result, runner's 75", Outcome{Code: 75, Vouch: &Vouch{Verified: true}}, 75, false},
		{"verified result, host noise retry", Outcome{Vouch: &Vouch{Verified: true}, HostRetry: true}, 75, true},
		{"runner's code beats a host noise retry", Outcome{Code: 143, Vouch: &Vouch{Verified: true}, HostRetry: true}, 143, false},
		{"nothing verifies, exit 0", Outcome{Vouch: &Vouch{Reason: "forged"}}, 1, true},
		{"nothing verifies, exit 75 is not retried", Outcome{Code: 75, Vouch: &Vouch{Reason: "forged"}}, 1, true},
		// 255 is what the agent reports for its own or docker's failure:
		// retried elsewhere, so never passed on from a container alone.
		{"nothing verifies, exit 255 is not retried", Outcome{Code: 255, Vouch: &Vouch{Reason: "forged"}}, 1, true},
		{"nothing verifies, killed", Outcome{Code: 137, Vouch: &Vouch{Reason: "killed"}}, 137, false},
	} {
		code, err := tc.out.Exit()
		if code != tc.code || (err != nil) != tc.message {
			t.Errorf("%s: Exit() = %d, %v; want %d (message %v)", tc.name, code, err, tc.code, tc.message)
		}
	}
}
