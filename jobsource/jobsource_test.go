package jobsource

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	for _, tc := range []struct {
		name     string
		src      Source
		opts     Options
		wantMode payload.Mode
		wantErr  string // "" = no error; usage errors start with "usage:"
	}{
		{"default example", Source{}, Options{DefaultExample: true, DefaultMode: payload.ModeLeaderboard}, payload.ModeLeaderboard, ""},
		{"no default", Source{}, Options{}, "", "usage:no job"},
		{"example mode", Source{Example: "identity", Submission: "wrong", Mode: payload.ModeBenchmark}, Options{DefaultMode: payload.ModeTest}, payload.ModeBenchmark, ""},
		{"example file", Source{Example: "vectoradd", Submission: sub}, Options{DefaultMode: payload.ModeTest}, payload.ModeTest, ""},
		{"unknown example", Source{Example: "nope"}, Options{}, "", "usage:unknown example"},
		{"task", Source{Task: task, Submission: sub}, Options{DefaultMode: payload.ModeTest}, payload.ModeTest, ""},
		{"task without submission", Source{Task: task}, Options{}, "", "usage:--task needs --submission"},
		{"missing task", Source{Task: "nope", Submission: sub}, Options{DefaultMode: payload.ModeTest}, "", "usage:reading task"},
		{"payload keeps its mode", Source{PayloadFile: job}, Options{DefaultMode: payload.ModeLeaderboard}, payload.ModeTest, ""},
		{"payload mode override", Source{PayloadFile: job, Mode: payload.ModeBenchmark}, Options{}, payload.ModeBenchmark, ""},
		{"payload and submission", Source{PayloadFile: job, Submission: "x"}, Options{}, "", "usage:--submission goes with"},
		{"two sources", Source{PayloadFile: job, Task: task}, Options{}, "", "usage:give one of"},
		{"bad mode", Source{Example: "identity", Mode: "fast"}, Options{}, "", `usage:--mode: unknown mode "fast"`},
		{"missing payload", Source{PayloadFile: filepath.Join(dir, "none")}, Options{}, "", "usage:reading job"},
		{"stdin", Source{PayloadFile: "-"}, Options{Stdin: strings.NewReader("not a job")}, "", "invalid job"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			in, err := Load(tc.src, tc.opts)
			if tc.wantErr != "" {
				got := ""
				if err != nil {
					got = err.Error()
					if exitcode.IsUsage(err) {
						got = "usage:" + got
					}
				}
				if !strings.HasPrefix(got, tc.wantErr) {
					t.Fatalf("err = %q, want prefix %q", got, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
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
