package main

import (
	"bytes"
	"errors"
	"fmt"
	"testing"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
)

// TestExitErrors: report prints an error once, on one line, and ends with
// its code; a silent exit prints nothing, and its Error() (for a wrapper or
// a log) names the code instead of panicking on the nil inner error.
func TestExitErrors(t *testing.T) {
	tests := []struct {
		name     string
		err      error
		code     int
		printed  string
		errorMsg string
	}{
		{"silent", exitcode.Silent(exitcode.RunnerFailed), exitcode.RunnerFailed, "", "exit status 3"},
		{"wrapped silent", fmt.Errorf("ctx: %w", exitcode.Silent(exitcode.Failure)), exitcode.Failure, "", "ctx: exit status 1"},
		{"with code", exitcode.With(exitcode.Usage, errors.New("bad flag")), exitcode.Usage, "kbgen: bad flag\n", "bad flag"},
		{"job error", &payload.Error{Kind: payload.KindNotJSON, Msg: "not JSON"}, exitcode.BadJob, "kbgen: invalid job: not JSON\n", "invalid job: not JSON"},
		{"plain", errors.New("boom"), exitcode.Failure, "kbgen: boom\n", "boom"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr bytes.Buffer
			if code := report(&stderr, tt.err); code != tt.code {
				t.Errorf("code %d, want %d", code, tt.code)
			}
			if stderr.String() != tt.printed {
				t.Errorf("printed %q, want %q", stderr.String(), tt.printed)
			}
			// The text is the contract: it is what a wrapper or a log prints for the error.
			if got := tt.err.Error(); got != tt.errorMsg {
				t.Errorf("Error() = %q, want %q", got, tt.errorMsg)
			}
		})
	}
	if exitcode.With(exitcode.Usage, nil) != nil {
		t.Error("exitcode.With(nil) is not nil")
	}
}
