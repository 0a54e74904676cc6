package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/seal"
	"github.com/gpu-mode/kbgen/signing"
)

func jobEnv(t *testing.T) map[string]string {
	t.Helper()
	env := dockerargvtest.NVIDIAPlacementEnv()
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
	host := dockerargvtest.FakeHost(t, nil)
	j, err := NewJob(lookup(jobEnv(t)), Request{Command: []string{"kbgen", "run"}, RunnerBinary: "/usr/local/bin/kbgen", Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	if want := "/var/lib/buildkite-agent/builds/.kbgen-stage/kbgen-job-7"; j.Stage.Dir != want || j.Stage.PayloadFile == "" {
		t.Errorf("stage = %+v, want under %s with a payload file", j.Stage, want)
	}
	if got := dockerargvtest.FlagValues(j.Spec, "--cpuset-cpus"); len(got) != 1 || got[0] != "36,148" {
		t.Errorf("--cpuset-cpus = %q, want one whole core", got)
	}

	tests := []struct {
		name   string
		change map[string]string
		is     func(error) bool
	}{
		{"re-routed", map[string]string{"BUILDKITE_AGENT_META_DATA_QUEUE": "amd-mi300"}, func(err error) bool { return errors.As(err, new(*signing.MisroutedError)) }},
		{"no payload", map[string]string{contract.EnvPayload: ""}, payload.IsJobError},
		{"refused", map[string]string{contract.EnvMemory: "4g"}, refusal.IsRefused},
		{"bad config", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img:1"}}]`}, refusal.IsConfigError},
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
	host := dockerargvtest.FakeHost(t, nil)
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
	// No sealed result came back: the sandbox's own failure replaces the
	// stale file, and the exit code stays the container's.
	if res := readResult(t, out); res.Success || !strings.Contains(res.Error, "no result from kbgen run that the sandbox can verify") {
		t.Errorf("result.json = %+v, want the sandbox's failure", res)
	}
	if _, err := os.Stat(j.Stage.Dir); !os.IsNotExist(err) {
		t.Errorf("stage left behind: %v", err)
	}
	// A dynamically linked runner is refused before docker is called.
	j.Runner = "/bin/sh"
	if _, err := j.Run(context.Background(), l, out); !refusal.IsRefused(err) {
		t.Errorf("dynamic runner: err = %v, want a refusal", err)
	}
}

func readResult(t *testing.T, dir string) *payload.FullResult {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, contract.ResultFile))
	if err != nil {
		t.Fatal(err)
	}
	var res payload.FullResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("result.json is not a FullResult: %v\n%s", err, b)
	}
	return &res
}

// TestJobRunVouches: with a stand-in docker, only a result sealed with the
// key the sandbox handed over on stdin is published; anything else the
// container prints (a forged envelope, a passing result.json on stdout)
// gives the sandbox's failed result, and exit 0 becomes 1.
func TestJobRunVouches(t *testing.T) {
	forgedKey, err := seal.NewKey()
	if err != nil {
		t.Fatal(err)
	}
	var forged bytes.Buffer
	if err := seal.Write(&forged, forgedKey, seal.Contents{Result: []byte(`{"success": true, "runs": {}}`)}); err != nil {
		t.Fatal(err)
	}
	genuine := `{"success": true, "error": "", "system": {}, "runs": {"test": {"start": "2026-11-24T00:00:00Z", "end": "2026-11-24T00:00:01Z"}}}` + "\n"
	tests := []struct {
		name     string
		steer    map[string]string
		sealer   bool
		verified bool
		exit     int
	}{
		{"the runner's sealed result", map[string]string{"result": genuine, "noise": forgedNoise}, true, true, 0},
		{"a forged envelope", map[string]string{"during": "printf '%s' '" + forged.String() + "'"}, false, false, 1},
		{"nothing sealed", nil, false, false, 1},
		{"killed before sealing", map[string]string{"exit": "137"}, false, false, 137},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, dir := fakeDocker(t)
			for k, v := range tt.steer {
				touch(t, dir, k, v)
			}
			if tt.sealer {
				sealing(t, dir)
			}
			env := jobEnv(t)
			env["BUILDKITE_BUILD_PATH"] = t.TempDir()
			host := dockerargvtest.FakeHost(t, nil)
			j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
			if err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(t.TempDir(), "results")
			o, err := j.Run(context.Background(), l, out)
			if err != nil || o.WriteErr != nil {
				t.Fatalf("run: %v, write: %v", err, o.WriteErr)
			}
			if o.Vouch == nil || o.Vouch.Verified != tt.verified {
				t.Fatalf("vouch = %+v, want verified %v", o.Vouch, tt.verified)
			}
			if _, ok := tt.steer["during"]; ok && !strings.Contains(o.Vouch.Reason, "1 frame(s) in the container's stdout, none verifies") {
				t.Errorf("reason %q does not say the forged frame was seen and refused", o.Vouch.Reason)
			}
			if code, _ := o.Exit(); code != tt.exit {
				t.Errorf("exit = %d, want %d", code, tt.exit)
			}
			b, _ := os.ReadFile(filepath.Join(out, contract.ResultFile))
			if tt.verified {
				if string(b) != genuine {
					t.Errorf("result.json = %q, want the runner's bytes", b)
				}
				return
			}
			res := readResult(t, out)
			if res.Success || !strings.Contains(res.Error, "kbgen sandbox: no result") {
				t.Errorf("result.json = %s, want the sandbox's failure", b)
			}
			if _, err := os.Stat(filepath.Join(out, contract.NoiseFile)); !os.IsNotExist(err) {
				t.Errorf("noise.json published without a verified result: %v", err)
			}
		})
	}
}

// TestJobRunSaysHowTheContainerEnded: a container that exits 137 without a
// verified result is "out of memory" only when the engine reports it
// OOM-killed (its oom event, State.OOMKilled); a SIGKILL the sandbox
// caused (a cancel that outlived the grace period, a second signal) or
// one from elsewhere on the host says so instead.
func TestJobRunSaysHowTheContainerEnded(t *testing.T) {
	const oom = "SIGKILL: out of memory"
	tests := []struct {
		name    string
		steer   []string // files that steer the stand-in docker
		signals int      // SIGTERMs sent once the container runs
		want    string
	}{
		{"the engine OOM-killed it", []string{"exit=137", "oom"}, 0, "exited 137 (SIGKILL: out of memory, the engine OOM-killed the container (docker's State.OOMKilled))"},
		{"killed from the host", []string{"exit=137"}, 0, "exited 137 (SIGKILL, not out of memory (the engine reports no OOM kill): killed from the host"},
		{"cancelled: killed after the grace period", []string{"wait", "stopkills"}, 1, "exited 137 (SIGKILL: the sandbox stopped the container on SIGTERM (the job was cancelled) and it did not exit within the grace period; not out of memory)"},
		{"cancelled twice", []string{"wait", "nostop"}, 2, "exited 137 (SIGKILL: the sandbox killed the container on a second SIGTERM; not out of memory)"},
		{"cancelled: stopped", []string{"wait"}, 1, "exited 143 (signal 15, after the sandbox stopped the container on SIGTERM: the job was cancelled)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, dir := fakeDocker(t)
			for _, f := range tt.steer {
				name, content, _ := strings.Cut(f, "=")
				touch(t, dir, name, content)
			}
			sigs := make(chan os.Signal, 2)
			l.Signals = sigs
			go func() {
				if tt.signals > 0 {
					waitFor(t, filepath.Join(dir, "running"))
				}
				for range tt.signals {
					sigs <- syscall.SIGTERM
					time.Sleep(100 * time.Millisecond)
				}
			}()
			env := jobEnv(t)
			env["BUILDKITE_BUILD_PATH"] = t.TempDir()
			host := dockerargvtest.FakeHost(t, nil)
			j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
			if err != nil {
				t.Fatal(err)
			}
			o, err := j.Run(context.Background(), l, filepath.Join(t.TempDir(), "results"))
			if err != nil || o.Vouch == nil {
				t.Fatalf("run: %v, vouch %+v", err, o.Vouch)
			}
			if !strings.Contains(o.Vouch.Reason, tt.want) {
				t.Errorf("reason %q\ndoes not say %q", o.Vouch.Reason, tt.want)
			}
			if !slices.Contains(tt.steer, "oom") && strings.Contains(o.Vouch.Reason, oom) {
				t.Errorf("blamed on memory the engine did not report: %q", o.Vouch.Reason)
			}
		})
	}
}

// The helper mounted is only ever the one beside the runner: the job's
// env may turn it off, never point it at another host file.
func TestNVMLHelperBesideTheRunner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	runner := filepath.Join(dir, "kbgen")
	if err := os.WriteFile(filepath.Join(dir, "kbgen-nvml"), []byte("\x7fELF"), 0o755); err != nil {
		t.Fatal(err)
	}
	bare := filepath.Join(t.TempDir(), "kbgen")
	tests := []struct {
		name   string
		env    map[string]string
		runner string
		want   string
	}{
		{"beside the runner", nil, runner, filepath.Join(dir, "kbgen-nvml")},
		{"none beside the runner", nil, bare, ""},
		{"the job names another file", map[string]string{contract.EnvNVMLHelper: "/etc/shadow"}, bare, ""},
		{"the job names another file, a helper beside", map[string]string{contract.EnvNVMLHelper: "/etc/shadow"}, runner, filepath.Join(dir, "kbgen-nvml")},
		{"the job turns it off", map[string]string{contract.EnvNVMLHelper: "off"}, runner, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var step Step
			step.readCommon(lookup(tc.env), Request{})
			if got := nvmlHelper(step.NVMLOff, tc.runner); got != tc.want {
				t.Errorf("nvmlHelper = %q, want %q", got, tc.want)
			}
		})
	}
}
