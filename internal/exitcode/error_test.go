package exitcode

import (
	"errors"
	"fmt"
	"testing"
)

// coded is a package's own typed error that knows its code.
type coded struct{}

func (coded) Error() string { return "bad job" }
func (coded) ExitCode() int { return BadJob }

func TestOf(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		err      error
		wantCode int
		wantMsg  string
	}{
		{"nil", nil, OK, ""},
		{"a plain error", errors.New("boom"), Failure, "boom"},
		{"with a code", With(TempFail, errors.New("no GPU")), TempFail, "no GPU"},
		{"wrapped: the context stays in the message", fmt.Errorf("loading: %w", Usagef("--x: %s", "bad")), Usage, "loading: --x: bad"},
		{"silent", Silent(Failure), Failure, ""},
		{"a package's typed error", fmt.Errorf("reading: %w", coded{}), BadJob, "reading: bad job"},
		{"the outermost code wins", With(Usage, coded{}), Usage, "bad job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := Of(tc.err); got != tc.wantCode {
				t.Errorf("Of = %d, want %d", got, tc.wantCode)
			}
			if tc.err == nil {
				return
			}
			if got := Message(tc.err); got != tc.wantMsg {
				t.Errorf("Message = %q, want %q", got, tc.wantMsg)
			}
		})
	}
	if With(Usage, nil) != nil {
		t.Error("With(code, nil) is not nil")
	}
}

func TestExit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		code     int
		err      error
		wantCode int
		wantMsg  string
	}{
		{"OK hides an error already logged", OK, errors.New("logged"), OK, ""},
		{"a code with nothing more to say", TempFail, nil, TempFail, ""},
		{"a code and its cause", Canceled, errors.New("received terminated"), Canceled, "received terminated"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Exit(tc.code, tc.err)
			if Of(err) != tc.wantCode || (err == nil) != (tc.wantCode == OK) {
				t.Fatalf("Exit = %v (code %d), want code %d", err, Of(err), tc.wantCode)
			}
			if err != nil && Message(err) != tc.wantMsg {
				t.Errorf("Message = %q, want %q", Message(err), tc.wantMsg)
			}
		})
	}
}

func TestIsInfraRetry(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]bool{AgentLost: true, AgentInfra: true, TempFail: true, OK: false, Failure: false, BadJob: false, Canceled: false, 137: false} {
		if got := IsInfraRetry(code); got != want {
			t.Errorf("IsInfraRetry(%d) = %v, want %v", code, got, want)
		}
	}
}
