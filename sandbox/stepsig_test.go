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
	"testing"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/signing"
)

// uploadEnv is the interpolation env of an agent's pipeline upload; the
// generated pipeline refers to no variable, so it stays empty.
type uploadEnv map[string]string

func (e uploadEnv) Get(k string) (string, bool) { v, ok := e[k]; return v, ok }
func (e uploadEnv) Set(k, v string)             { e[k] = v }

// signedJob is a job as the agent host sees it: the eval step kbgen
// generate made and signed for nvidia-h100, uploaded (parsed and
// interpolated by go-pipeline, as the agent does), handed to the job as
// env the way Buildkite does (step env, BUILDKITE_PLUGINS as the JSON of
// the step's plugins, the build's payload) plus this agent's placement and
// the hook's KBGEN_VERIFICATION_KEY. It returns the env and the argv the
// gpu-docker hook would pass.
func signedJob(t *testing.T) (map[string]string, []string) {
	t.Helper()
	kp, err := signing.Generate("EdDSA", "kernelbot-test")
	if err != nil {
		t.Fatal(err)
	}
	priv, err := signing.ParsePrivate(kp.Private, "")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "verification.jwks")
	if err := os.WriteFile(keyFile, kp.Public, 0o644); err != nil {
		t.Fatal(err)
	}
	enc, err := payload.Encode([]byte(`{"lang": "py", "mode": "test", "sources": {"eval.py": "", "submission.py": ""}, "main": "eval.py", "tests": [{"n": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	in, err := payload.ParseInput([]byte(enc))
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	v, err := reg.Lookup("nvidia-h100")
	if err != nil {
		t.Fatal(err)
	}
	// A run id with a '$': signed as the agent stores it, after `$$` → `$`.
	p, err := pipelinegen.Generate(pipelinegen.Job{Input: in, RunID: "run-$HOME-7", Queue: v.Queue}, v, pipelinegen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinegen.SignEvalStep(p, priv, payload.Checksum(enc)); err != nil {
		t.Fatal(err)
	}
	if err := pipelinegen.Sign(context.Background(), p, priv, "https://github.com/gpu-mode/kbgen.git"); err != nil {
		t.Fatal(err)
	}
	doc, err := pipelinegen.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	up, err := pipeline.Parse(bytes.NewReader(doc))
	if err != nil {
		t.Fatal(err)
	}
	if err := up.Interpolate(uploadEnv{}, false); err != nil {
		t.Fatal(err)
	}
	step := up.Steps[0].(*pipeline.CommandStep)
	plugins, err := json.Marshal(step.Plugins)
	if err != nil {
		t.Fatal(err)
	}
	env := dockerargvtest.NVIDIAPlacementEnv()
	for k, v := range step.Env {
		env[k] = v
	}
	for k, v := range payload.SplitEnv(enc) {
		env[k] = v
	}
	env[contract.EnvPlugins] = string(plugins)
	env[contract.EnvJobID] = "job-7"
	env[contract.EnvBuildPath] = dir
	env[contract.EnvAgentQueue] = "nvidia-h100"
	env[contract.EnvVerificationKey] = keyFile
	return env, strings.Fields(step.Command)
}

func TestStepSignatureOnHost(t *testing.T) {
	t.Parallel()
	host := dockerargvtest.FakeHost(t, nil)
	newJob := func(env map[string]string, argv []string) error {
		_, err := NewJob(lookup(env), Request{Command: argv, RunnerBinary: "/usr/local/bin/kbgen", Host: &host})
		return err
	}
	env, argv := signedJob(t)
	if env[contract.EnvRunID] != "run-$HOME-7" || env[contract.EnvStepSignature] == "" {
		t.Fatalf("the uploaded step's env is not what the test means to check: %v", env)
	}
	if err := newJob(env, argv); err != nil {
		t.Fatalf("the step as signed is refused: %v", err)
	}

	setPlugin := func(key string, val any) func(map[string]string, *[]string) {
		return func(env map[string]string, _ *[]string) {
			var list []map[string]map[string]any
			if err := json.Unmarshal([]byte(env[contract.EnvPlugins]), &list); err != nil {
				t.Fatal(err)
			}
			for _, cfg := range list[0] {
				cfg[key] = val
			}
			b, _ := json.Marshal(list)
			env[contract.EnvPlugins] = string(b)
		}
	}
	otherKey := filepath.Join(t.TempDir(), "other.jwks")
	kp, err := signing.Generate("EdDSA", "kernelbot-test")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(otherKey, kp.Public, 0o644); err != nil {
		t.Fatal(err)
	}
	otherPayload, err := payload.Encode([]byte(`{"lang": "py", "mode": "benchmark", "sources": {"eval.py": "", "submission.py": ""}, "main": "eval.py", "tests": [{"n": 1}], "benchmarks": [{"n": 2}]}`))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change func(map[string]string, *[]string)
		code   int
		want   string
	}{
		// What may differ without changing the step.
		{"cpus as a string", setPlugin("cpus", "12"), exitcode.OK, ""},
		{"no key on the node", func(env map[string]string, _ *[]string) {
			delete(env, contract.EnvVerificationKey)
			delete(env, contract.EnvStepSignature)
		}, exitcode.OK, ""},
		// A step changed after signing.
		{"command", func(_ map[string]string, argv *[]string) { *argv = []string{"python3", "-c", "print(1)"} }, exitcode.BadJob, "the command"},
		{"image", setPlugin("image", "ghcr.io/evil/miner:latest"), exitcode.BadJob, "plugin's image"},
		{"cpus", setPlugin("cpus", 4), exitcode.BadJob, "plugin's cpus"},
		{"network", setPlugin("network", "bridge"), exitcode.BadJob, "plugin's network"},
		{"added plugin", func(env map[string]string, _ *[]string) {
			env[contract.EnvPlugins] = strings.TrimSuffix(env[contract.EnvPlugins], "]") + `,{"docker#v5.12.0":{"image":"alpine","privileged":true}}]`
		}, exitcode.BadJob, "the plugins"},
		{"run id", func(env map[string]string, _ *[]string) { env[contract.EnvRunID] = "someone-else" }, exitcode.BadJob, "step env KERNELBOT_RUN_ID"},
		{"noise policy dropped", func(env map[string]string, _ *[]string) { delete(env, contract.EnvNoisePolicy) }, exitcode.BadJob, "step env KBGEN_NOISE_POLICY"},
		{"payload", func(env map[string]string, _ *[]string) {
			for k := range env {
				if payload.IsPayloadEnvKey(k) || strings.HasPrefix(k, contract.EnvPayload+"_") {
					delete(env, k)
				}
			}
			env[contract.EnvPayload] = otherPayload
		}, exitcode.BadJob, "the payload"},
		{"missing signature", func(env map[string]string, _ *[]string) { delete(env, contract.EnvStepSignature) }, exitcode.BadJob, "carries no KBGEN_STEP_SIGNATURE"},
		{"wrong key", func(env map[string]string, _ *[]string) { env[contract.EnvVerificationKey] = otherKey }, exitcode.BadJob, "does not verify"},
		{"key file missing", func(env map[string]string, _ *[]string) { env[contract.EnvVerificationKey] = otherKey + ".absent" }, exitcode.TempFail, "verification key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env, argv := signedJob(t)
			tt.change(env, &argv)
			err := newJob(env, argv)
			if got := exitcode.Of(err); got != tt.code {
				t.Fatalf("exit %d (%v), want %d", got, err, tt.code)
			}
			if tt.code == exitcode.BadJob && !errors.As(err, new(*signing.StepSignatureError)) {
				t.Errorf("err = %v (%T), want a *signing.StepSignatureError", err, err)
			}
			if tt.code == exitcode.TempFail && !refusal.IsRefused(err) {
				t.Errorf("err = %v (%T), want a refusal: another agent may run the step", err, err)
			}
			// The message is the contract: it names what changed, for the operator to find.
			if err != nil && !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to name %q", err, tt.want)
			}
		})
	}
}

// TestPassedEnvIsSigned: every host variable the sandbox passes into the
// container is one a step signature covers.
func TestPassedEnvIsSigned(t *testing.T) {
	t.Parallel()
	for _, k := range dockerargv.PassedEnv {
		if !slices.Contains(signing.StepEnv, k) {
			t.Errorf("%s reaches the container but is not in signing.StepEnv", k)
		}
	}
}
