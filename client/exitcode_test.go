package client

import "testing"

// TestStatusExitCode pins the exit codes scripts branch on
// (docs/formats.md#exit-codes).
func TestStatusExitCode(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		status Status
		code   int
	}{
		{Obtained, 0},
		{RunnerFailed, 3},
		{Infra, 4},
		{TimedOut, 5},
		{Status(99), 1},
	} {
		if got := tc.status.ExitCode(); got != tc.code {
			t.Errorf("Status(%d).ExitCode() = %d, want %d", tc.status, got, tc.code)
		}
	}
}
