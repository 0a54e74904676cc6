package jobsource

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
)

func TestLoadPicksOneSource(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	job := filepath.Join(dir, "job.json")
	if err := os.WriteFile(job, []byte(`{"lang":"py","mode":"test","main":"eval.py","sources":{"eval.py":""},"tests":[{"size":1}],"benchmarks":[{"size":2}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	task := filepath.Join("..", "examples", "identity")
	sub := filepath.Join(task, "wrong.py")
	notExist := func(err error) bool { return errors.Is(err, fs.ErrNotExist) }
	usage := func(err error) bool { return errors.As(err, new(*UsageError)) }
	for _, tc := range []struct {
		name     string
		src      Source
		opts     Options
		wantMode payload.Mode
		wantCode int              // exitcode.Of the error; OK = none
		is       func(error) bool // the cause, where it has a type
		wantMsg  string           // a prefix of the message, where the message is all the user gets (conflicting flags)
	}{
		{"default example", Source{}, Options{DefaultExample: true, DefaultMode: payload.ModeLeaderboard}, payload.ModeLeaderboard, exitcode.OK, nil, ""},
		{"no default", Source{}, Options{}, "", exitcode.Usage, usage, "no job"},
		{"example mode", Source{Example: "identity", Submission: "wrong", Mode: payload.ModeBenchmark}, Options{DefaultMode: payload.ModeTest}, payload.ModeBenchmark, exitcode.OK, nil, ""},
		{"example file", Source{Example: "vectoradd", Submission: sub}, Options{DefaultMode: payload.ModeTest}, payload.ModeTest, exitcode.OK, nil, ""},
		{"unknown example", Source{Example: "nope"}, Options{}, "", exitcode.Usage, func(err error) bool { return errors.Is(err, examples.ErrUnknownExample) }, ""},
		{"task", Source{Task: task, Submission: sub}, Options{DefaultMode: payload.ModeTest}, payload.ModeTest, exitcode.OK, nil, ""},
		{"task without submission", Source{Task: task}, Options{}, "", exitcode.Usage, usage, "--task needs --submission"},
		{"missing task", Source{Task: "nope", Submission: sub}, Options{DefaultMode: payload.ModeTest}, "", exitcode.Usage, notExist, ""},
		{"payload keeps its mode", Source{PayloadFile: job}, Options{DefaultMode: payload.ModeLeaderboard}, payload.ModeTest, exitcode.OK, nil, ""},
		{"payload mode override", Source{PayloadFile: job, Mode: payload.ModeBenchmark}, Options{}, payload.ModeBenchmark, exitcode.OK, nil, ""},
		{"payload and submission", Source{PayloadFile: job, Submission: "x"}, Options{}, "", exitcode.Usage, usage, "--submission goes with"},
		{"two sources", Source{PayloadFile: job, Task: task}, Options{}, "", exitcode.Usage, usage, "give one of"},
		{"bad mode", Source{Example: "identity", Mode: "fast"}, Options{}, "", exitcode.Usage, func(err error) bool {
			me, ok := errors.AsType[*payload.ModeError](err)
			return ok && me.Mode == "fast"
		}, ""},
		{"missing payload", Source{PayloadFile: filepath.Join(dir, "none")}, Options{}, "", exitcode.Usage, notExist, ""},
		{"stdin", Source{PayloadFile: "-"}, Options{Stdin: strings.NewReader("not a job")}, "", exitcode.BadJob, payload.IsJobError, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := Load(tc.src, tc.opts)
			if got := exitcode.Of(err); got != tc.wantCode {
				t.Fatalf("exit %d (%v), want %d", got, err, tc.wantCode)
			}
			if tc.is != nil && !tc.is(err) {
				t.Errorf("err = %v (%T), not the cause wanted", err, err)
			}
			if tc.wantMsg != "" && !strings.HasPrefix(err.Error(), tc.wantMsg) {
				t.Errorf("err = %q, want prefix %q", err, tc.wantMsg)
			}
			if err != nil {
				return
			}
			if in.Config.Mode != tc.wantMode {
				t.Errorf("mode %s, want %s", in.Config.Mode, tc.wantMode)
			}
			back, err := payload.Decode(in.Encoded)
			if err != nil || back.Mode != tc.wantMode {
				t.Errorf("the encoded job does not carry the mode: %v, %v", back, err)
			}
		})
	}
}

func TestExampleSubmissionFileIsTheSubmission(t *testing.T) {
	t.Parallel()
	sub := filepath.Join("..", "examples", "identity", "wrong.py")
	want, err := os.ReadFile(sub)
	if err != nil {
		t.Fatal(err)
	}
	in, err := Load(Source{Example: "vectoradd", Submission: sub}, Options{DefaultMode: payload.ModeTest})
	if err != nil {
		t.Fatal(err)
	}
	if in.Config.Sources["submission.py"] != string(want) {
		t.Error("submission.py is not the file's content")
	}
}
