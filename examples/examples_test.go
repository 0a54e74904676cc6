package examples

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/task"
)

func TestListHasTheAdvertisedExamples(t *testing.T) {
	t.Parallel()
	names := Names()
	for _, want := range []string{"vectoradd", "identity"} {
		if !slices.Contains(names, want) {
			t.Errorf("example %s missing from %v", want, names)
		}
	}
	for _, e := range List() {
		if e.Description == "" || e.Submissions[0] != DefaultSubmission {
			t.Errorf("%s: bad listing %+v", e.Name, e)
		}
	}
}

func TestConfigIsAValidJob(t *testing.T) {
	t.Parallel()
	for _, name := range Names() {
		for _, mode := range payload.Modes {
			src, err := Submission(name, DefaultSubmission)
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := Config(name, mode, src)
			if err != nil {
				t.Fatalf("%s/%s: %v", name, mode, err)
			}
			for _, f := range []string{"eval.py", "worker.py", "utils.py", "reference.py", "task.py", "submission.py"} {
				if _, ok := cfg.Sources[f]; !ok {
					t.Errorf("%s: %s missing from sources", name, f)
				}
			}
			if (mode == payload.ModePrivate) != (cfg.Seed != nil) {
				t.Errorf("%s/%s: seed %v", name, mode, cfg.Seed)
			}
		}
	}
}

func TestSubmissionErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		example, sub string
		want         error
	}{
		{"nope", "submission", ErrUnknownExample},
		{"../identity", "submission", ErrUnknownExample},
		{"identity", "missing", ErrNoSubmission},
		{"identity", "../submission", ErrNoSubmission},
	} {
		if _, err := Submission(tc.example, tc.sub); !errors.Is(err, tc.want) {
			t.Errorf("%s/%s: got %v, want %v", tc.example, tc.sub, err, tc.want)
		}
	}
	// The message lists what there is: the user's next try.
	if _, err := Submission("identity", "missing"); !errors.Is(err, ErrNoSubmission) || !strings.Contains(err.Error(), `no submission "missing" (have: submission, cheat-daemon`) {
		t.Errorf("identity/missing: %v, want the submissions listed", err)
	}
	if s, err := Submission("identity", "cheat-pipe"); err != nil || !strings.Contains(s, "check: pass") {
		t.Errorf("cheat-pipe: %v", err)
	}
}

// The directories on disk are Kernelbot task directories: `kbgen local
// --task examples/NAME` builds the very job `--example NAME` does.
func TestTaskDirOnDiskIsTheEmbeddedExample(t *testing.T) {
	t.Parallel()
	for _, name := range Names() {
		src, err := Submission(name, DefaultSubmission)
		if err != nil {
			t.Fatal(err)
		}
		embedded, err := Config(name, payload.ModeTest, src)
		if err != nil {
			t.Fatal(err)
		}
		onDisk, err := task.Build(name, name+"/submission.py", payload.ModeTest)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		a, _ := payload.EncodeConfig(embedded)
		b, _ := payload.EncodeConfig(onDisk)
		if a != b {
			t.Errorf("%s: the embedded job differs from the task directory's", name)
		}
	}
}
