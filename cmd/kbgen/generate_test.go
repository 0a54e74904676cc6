package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
)

func exampleEncoded(t *testing.T) string {
	t.Helper()
	in, err := pipelinegen.ExampleJob(payload.ModeLeaderboard)
	if err != nil {
		t.Fatal(err)
	}
	return in.Encoded
}

func TestGenerateFromBuildEnv(t *testing.T) {
	env := payload.SplitEnv(exampleEncoded(t))
	env[contract.EnvQueue] = "b200"
	env[contract.EnvRunID] = "run-$HOME"
	env[contract.EnvUser] = "alice"
	env[contract.EnvPriority] = "3"
	r := runKbgen(t, env, "", "generate")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	for _, want := range []string{"queue: nvidia-b200", "KERNELBOT_RUN_ID: run-$$HOME", "KBGEN_GENERATOR_VERSION: dev", "priority: 3", "concurrency_group: kernelbot/nvidia-b200/user/alice", "· leaderboard"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("pipeline lacks %q:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, env[contract.EnvPayload]) {
		t.Error("the payload must not be copied into the pipeline (it travels in the build env)")
	}
}

// TestGenerateBadBuildEnvIsAJobError: what the build env asks for and the
// queue cannot give is the job's fault (65, never retried), not a usage
// error (2): nobody typed a flag wrong.
func TestGenerateBadBuildEnvIsAJobError(t *testing.T) {
	in, err := pipelinegen.ExampleJob(payload.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	multi := *in.Config
	multi.MultiGPU = true
	multiEnc, err := payload.EncodeConfig(&multi)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		encoded string
		set     map[string]string
		want    string
	}{
		{"priority not a number", in.Encoded, map[string]string{contract.EnvPriority: "high"}, `KERNELBOT_PRIORITY: "high" is not an integer from -100 to 100`},
		{"priority out of range", in.Encoded, map[string]string{contract.EnvPriority: "1000"}, `KERNELBOT_PRIORITY: "1000" is not an integer`},
		{"bad image", in.Encoded, map[string]string{contract.EnvImage: "--privileged"}, `KERNELBOT_IMAGE: "--privileged" is not an image reference`},
		{"multi-GPU on a one-GPU queue", multiEnc, nil, "multi_gpu: the job asks for multiple GPUs but queue \"nvidia-h100\" gives each step 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := payload.SplitEnv(tt.encoded)
			env[contract.EnvQueue] = "h100"
			for k, v := range tt.set {
				env[k] = v
			}
			r := runKbgen(t, env, "", "generate")
			if r.code != exitcode.BadJob || !strings.Contains(r.stderr, tt.want) || strings.Count(r.stderr, "\n") != 1 {
				t.Errorf("exit %d, stderr %q; want exit 65 and one line with %q", r.code, r.stderr, tt.want)
			}
		})
	}
}

func TestGenerateSplitPayloadFromEnv(t *testing.T) {
	in, _ := pipelinegen.ExampleJob(payload.ModeTest)
	cfg := *in.Config
	cfg.Sources = map[string]string{"eval.py": "", "submission.py": strings.Repeat("# noise that does not compress: ", 1) + randomText(300_000)}
	enc, err := payload.EncodeConfig(&cfg)
	if err != nil {
		t.Fatal(err)
	}
	env := payload.SplitEnv(enc)
	if _, single := env[contract.EnvPayload]; single {
		t.Fatalf("test payload of %d bytes was not split", len(enc))
	}
	env[contract.EnvQueue] = "mi300"
	if r := runKbgen(t, env, "", "generate"); r.code != 0 || !strings.Contains(r.stdout, "queue: amd-mi300") {
		t.Fatalf("split payload: exit %d %s", r.code, r.stderr)
	}
	env[contract.EnvPayload+"_1"] = "AAAA" + env[contract.EnvPayload+"_1"][4:]
	r := runKbgen(t, env, "", "generate")
	if r.code != 65 || !strings.Contains(r.stderr, "checksum") {
		t.Fatalf("tampered split payload: exit %d %s", r.code, r.stderr)
	}
}

func TestGenerateWithoutJobPasses(t *testing.T) {
	r := runKbgen(t, map[string]string{}, "", "generate")
	if r.code != 0 || !strings.Contains(r.stderr, "no Kernelbot job") || !strings.Contains(r.stdout, "wait") {
		t.Fatalf("exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
}

// uploadAgent writes a stand-in buildkite-agent into dir that appends each
// call's argv to dir/calls, keeps the pipeline it is given in dir/stdin,
// keeps meta-data as files (exists exits 100 for a key not set, as the
// real one does: clicommand/meta_data_exists.go), and fails the upload
// when FAIL is set.
func uploadAgent(t *testing.T, dir string) string {
	t.Helper()
	agent := filepath.Join(dir, "buildkite-agent")
	script := `#!/bin/sh
echo "$*" >> ` + dir + `/calls
case "$1 $2" in
"meta-data exists") [ -f ` + dir + `/meta-"$3" ] || exit 100 ;;
"meta-data set") cat > ` + dir + `/meta-"$3" ;;
"pipeline upload") cat > ` + dir + `/stdin; [ -z "$FAIL" ] || { echo 'pipeline upload failed: 422 invalid step' >&2; exit 1; } ;;
esac
`
	if err := os.WriteFile(agent, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return agent
}

// TestGenerateUpload: the pipeline goes to the agent on stdin; a
// successful upload is recorded in meta-data kbgen_uploaded (the
// bootstrap job's id), and a retried bootstrap that finds it uploads
// nothing; a failing agent fails the command with its message and
// records nothing.
func TestGenerateUpload(t *testing.T) {
	for _, tc := range []struct {
		name      string
		env       map[string]string
		runs      int
		wantCode  int
		wantCalls string
		wantErr   string
	}{
		{name: "first upload", runs: 1,
			wantCalls: "meta-data exists kbgen_uploaded\npipeline upload\nmeta-data set kbgen_uploaded\n"},
		{name: "retried bootstrap uploads nothing", runs: 2,
			wantCalls: "meta-data exists kbgen_uploaded\npipeline upload\nmeta-data set kbgen_uploaded\nmeta-data exists kbgen_uploaded\n",
			wantErr:   "already uploaded"},
		{name: "failing upload", runs: 1, env: map[string]string{"FAIL": "1"}, wantCode: 1,
			wantCalls: "meta-data exists kbgen_uploaded\npipeline upload\n", wantErr: "422 invalid step"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			agent := uploadAgent(t, dir)
			env := payload.SplitEnv(exampleEncoded(t))
			env[contract.EnvQueue] = "h100"
			env[contract.EnvJobID] = "job-1"
			for k, v := range tc.env {
				env[k] = v
			}
			var r cliResult
			for range tc.runs {
				r = runKbgen(t, env, "", "generate", "--upload", "--agent", agent)
			}
			if r.code != tc.wantCode || !strings.Contains(r.stderr, tc.wantErr) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, tc.wantCode, tc.wantErr)
			}
			calls, _ := os.ReadFile(filepath.Join(dir, "calls"))
			if string(calls) != tc.wantCalls {
				t.Errorf("agent calls\n%s\nwant\n%s", calls, tc.wantCalls)
			}
			if r.stdout != "" {
				t.Errorf("--upload printed the pipeline too: %q", r.stdout)
			}
			if tc.wantCode != 0 {
				return
			}
			stdin, _ := os.ReadFile(filepath.Join(dir, "stdin"))
			marker, _ := os.ReadFile(filepath.Join(dir, "meta-kbgen_uploaded"))
			if !strings.Contains(string(stdin), "command: kbgen run") || string(marker) != "job-1" {
				t.Errorf("agent stdin %q, meta-data kbgen_uploaded %q; want the pipeline and job-1", stdin, marker)
			}
		})
	}
}

// randomText is incompressible-ish ASCII so the encoded payload is large.
func randomText(n int) string {
	var b strings.Builder
	x := uint32(2463534242)
	for b.Len() < n {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		b.WriteByte(byte('a' + x%26))
	}
	return b.String()
}

// TestGenerateVendorsFromEnv: KBGEN_VENDORS replaces the registry as
// --vendors does, and the flag wins over the env.
func TestGenerateVendorsFromEnv(t *testing.T) {
	env := payload.SplitEnv(exampleEncoded(t))
	env[contract.EnvQueue] = "lab-a100"
	env[contract.EnvVendors] = "../../golden/cli/fixtures/vendors-one.yaml"
	if r := runKbgen(t, env, "", "generate"); r.code != 0 || !strings.Contains(r.stdout, "image: registry.example/runner:1") {
		t.Fatalf("KBGEN_VENDORS: exit %d %s", r.code, r.stderr)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(bad, []byte("vendors: []\n"), 0o644)
	if r := runKbgen(t, env, "", "generate", "--vendors", bad); r.code != 2 || !strings.Contains(r.stderr, "lists no vendors") {
		t.Fatalf("--vendors over KBGEN_VENDORS: exit %d %s", r.code, r.stderr)
	}
}
