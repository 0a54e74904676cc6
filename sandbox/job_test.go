package sandbox

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/signing"
)

func jobEnv(t *testing.T) map[string]string {
	t.Helper()
	env := nvidiaPlacementEnv()
	env["BUILDKITE_PLUGINS"] = `[{"./.buildkite/plugins/gpu-docker":{"image":"img:1","runtime":"nvidia","cpus":2,"memory":"8g"}}]`
	env["BUILDKITE_JOB_ID"] = "job-7"
	env["BUILDKITE_BUILD_PATH"] = "/var/lib/buildkite-agent/builds"
	env["KERNELBOT_QUEUE"] = "nvidia-h100"
	env["BUILDKITE_AGENT_META_DATA_QUEUE"] = "nvidia-h100"
	env[contract.EnvLeaseDir] = t.TempDir()
	enc, err := payload.Encode([]byte(`{"lang": "py", "mode": "test", "sources": {"eval.py": "", "submission.py": ""}, "main": "eval.py", "tests": [{"n": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range payload.SplitEnv(enc) {
		env[k] = v
	}
	return env
}

func TestNewJob(t *testing.T) {
	host := fakeHost(t, nil)
	j, err := NewJob(lookup(jobEnv(t)), Request{Command: []string{"kbgen", "run"}, RunnerBinary: "/usr/local/bin/kbgen", Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/var/lib/buildkite-agent/builds/.kbgen-stage/kbgen-job-7"; j.Stage.Dir != want || j.Stage.PayloadFile == "" {
		t.Errorf("stage = %+v, want under %s with a payload file", j.Stage, want)
	}
	if got := flagValues(j.Spec, "--cpuset-cpus"); len(got) != 1 || got[0] != "36,148" {
		t.Errorf("--cpuset-cpus = %q, want one whole core", got)
	}

	tests := []struct {
		name   string
		change map[string]string
		is     func(error) bool
	}{
		{"re-routed", map[string]string{"BUILDKITE_AGENT_META_DATA_QUEUE": "amd-mi300"}, func(err error) bool { return errors.As(err, new(*signing.MisroutedError)) }},
		{"no payload", map[string]string{contract.EnvPayload: ""}, payload.IsJobError},
		{"refused", map[string]string{contract.EnvMemory: "4g"}, IsRefused},
		{"bad config", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img:1"}}]`}, IsConfigError},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := jobEnv(t)
			for k, v := range tt.change {
				env[k] = v
			}
			_, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: "/usr/local/bin/kbgen", Host: &host})
			if err == nil || !tt.is(err) {
				t.Errorf("err = %v", err)
			}
		})
	}
	// Without a job id (a person on the node) there is no queue to check.
	env := jobEnv(t)
	delete(env, "BUILDKITE_JOB_ID")
	delete(env, "KERNELBOT_QUEUE")
	if j, err := NewJob(lookup(env), Request{Command: []string{"true"}, RunnerBinary: "/usr/local/bin/kbgen", Host: &host}); err != nil || !strings.HasPrefix(j.Spec.Name, "kbgen-local-") {
		t.Errorf("manual run: %v", err)
	}
}

func TestStageBase(t *testing.T) {
	tests := []struct {
		dir  string
		env  map[string]string
		want string
	}{
		{"/srv/stage", map[string]string{"BUILDKITE_BUILD_PATH": "/b", "TMPDIR": "/t"}, "/srv/stage"},
		{"", map[string]string{"BUILDKITE_BUILD_PATH": "/b", "TMPDIR": "/t"}, "/b/.kbgen-stage"},
		{"", map[string]string{"TMPDIR": "/t"}, "/t"},
		{"", nil, "/tmp"},
	}
	for _, tt := range tests {
		if got := StageBase(tt.dir, lookup(tt.env)); got != tt.want {
			t.Errorf("StageBase(%q, %v) = %q, want %q", tt.dir, tt.env, got, tt.want)
		}
	}
}

// TestJobRun: with a stand-in docker, the stage exists during the run and
// is gone after, a stale result.json is not passed off as this run's, and
// the exit code comes back.
func TestJobRun(t *testing.T) {
	l, dir := fakeDocker(t)
	touch(t, dir, "exit", "3")
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	host := fakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	touch(t, out, contract.ResultFile, "stale")
	o, err := j.Run(context.Background(), l, out)
	if err != nil {
		t.Fatal(err)
	}
	if o.Code != 3 {
		t.Errorf("exit code = %d, want 3", o.Code)
	}
	if _, err := os.Stat(filepath.Join(out, contract.ResultFile)); !os.IsNotExist(err) {
		t.Errorf("stale result.json survived a run that wrote none: %v", err)
	}
	if _, err := os.Stat(j.Stage.Dir); !os.IsNotExist(err) {
		t.Errorf("stage left behind: %v", err)
	}
	// A dynamically linked runner is refused before docker is called.
	j.Runner = "/bin/sh"
	if _, err := j.Run(context.Background(), l, out); !IsRefused(err) {
		t.Errorf("dynamic runner: err = %v, want a refusal", err)
	}
}
