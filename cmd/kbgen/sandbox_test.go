package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// sandboxEnv is what the gpu-docker command hook sees on an NVIDIA agent:
// the plugin config, the placement, the job's env and the agent's secrets.
func sandboxEnv(t *testing.T) map[string]string {
	t.Helper()
	enc, err := payload.Encode([]byte(`{"lang": "py", "mode": "test", "sources": {"eval.py": "", "submission.py": ""}, "main": "eval.py", "tests": [{"n": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"BUILDKITE_PLUGINS":               `[{"./.buildkite/plugins/gpu-docker":{"image":"ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1","runtime":"nvidia","gpus":1,"cpus":4,"memory":"32g","shm-size":"8g","pids-limit":2048,"network":"none"}}]`,
		"BUILDKITE_JOB_ID":                "0190a1b2-c3d4",
		"BUILDKITE_AGENT_ACCESS_TOKEN":    "agent-token-planted",
		"KERNELBOT_RUN_ID":                "run-9",
		"KERNELBOT_QUEUE":                 "nvidia-l4",
		"BUILDKITE_AGENT_META_DATA_QUEUE": "nvidia-l4",
		"KERNELBOT_GPU_INDEX":             "1",
		"KERNELBOT_GPU_UUID":              "GPU-0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9",
		"KERNELBOT_CPUSET":                "9-15",
		"KERNELBOT_MEMS":                  "0",
		"KERNELBOT_MEMORY":                "120g",
	}
	for k, v := range payload.SplitEnv(enc) {
		env[k] = v
	}
	return env
}

func TestSandboxDryRun(t *testing.T) {
	env := sandboxEnv(t)
	r := runKbgen(t, env, "", "sandbox", "--dry-run", "--stage-dir", "/var/lib/buildkite-agent/tmp", "--runner-binary", "/usr/local/bin/kbgen", "--", "kbgen", "run")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if lines[0] != `docker \` || strings.TrimSpace(lines[1]) != `run \` {
		t.Errorf("dry run does not start with docker run:\n%s", r.stdout)
	}
	for _, want := range []string{
		"  --name kbgen-0190a1b2-c3d4 \\",
		"  --gpus device=GPU-0a1b2c3d-4e5f-4061-8293-a4b5c6d7e8f9 \\",
		"  --cpuset-cpus 9-12 \\",
		"  --memory 32g \\",
		"  --memory-swap 32g \\",
		"  --mount type=bind,source=/var/lib/buildkite-agent/tmp/kbgen-0190a1b2-c3d4/payload,target=/kbgen/payload,readonly \\",
		"  --env KERNELBOT_RUN_ID=run-9 \\",
		"  --entrypoint /usr/local/bin/kbgen \\",
		"  run --payload-file /kbgen/payload --out /kbgen/out/result.json --no-upload",
	} {
		if !contains(lines, want) {
			t.Errorf("dry run lacks the line %q:\n%s", want, r.stdout)
		}
	}
	for _, secret := range []string{"agent-token-planted", env[contract.EnvPayload][:40]} {
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("dry run shows a secret (%q)", secret)
		}
	}
	// A dry run writes nothing.
	if _, err := os.Stat("/var/lib/buildkite-agent/tmp/kbgen-0190a1b2-c3d4"); err == nil {
		t.Error("dry run created the stage")
	}
}

func contains(lines []string, want string) bool {
	for _, l := range lines {
		if l == want {
			return true
		}
	}
	return false
}

func TestSandboxExitCodes(t *testing.T) {
	notStatic := filepath.Join(t.TempDir(), "kbgen.sh")
	if err := os.WriteFile(notStatic, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		change map[string]string
		args   []string
		code   int
		want   string
	}{
		{"no placement", map[string]string{"KERNELBOT_CPUSET": ""}, nil, 75, "refused: this agent has no placement: KERNELBOT_CPUSET is not set"},
		{"no gpu", map[string]string{"KERNELBOT_GPU_UUID": ""}, nil, 75, "refused: this agent has no NVIDIA GPU placement: KERNELBOT_GPU_UUID is not set"},
		{"more cpus than the agent", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img","runtime":"nvidia","cpus":8}}]`}, nil, 75, "refused: cpus: 8 CPUs asked, the agent's cpuset 9-15 has 7"},
		{"more memory than the agent", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img","runtime":"nvidia","memory":"200g"}}]`}, nil, 75, "refused: memory: 200g asked, this agent owns 120g (KERNELBOT_MEMORY)"},
		{"two gpus", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img","runtime":"nvidia","gpus":2}}]`}, nil, 75, "refused: gpus: 2 asked, this agent owns one GPU"},
		{"render node missing", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img","runtime":"rocm"}}]`, "KERNELBOT_GPU_RENDER_NODE": "/dev/dri/renderD999"}, nil, 75, "refused: GPU device /dev/dri/renderD999 is not there"},
		{"unknown runtime", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img","runtime":"cuda"}}]`}, nil, 2, `gpu-docker plugin config: runtime: "cuda" is not a GPU runtime`},
		{"unknown key", map[string]string{"BUILDKITE_PLUGINS": `[{"gpu-docker":{"image":"img","privileged":true}}]`}, nil, 2, "gpu-docker plugin config: privileged: unknown key"},
		{"no payload", map[string]string{"KERNELBOT_PAYLOAD": ""}, nil, 65, "invalid job: no KERNELBOT_PAYLOAD"},
		{"bad payload", map[string]string{"KERNELBOT_PAYLOAD": "aGVsbG8=", "KERNELBOT_PAYLOAD_SHA256": ""}, nil, 65, "invalid job: payload is base64 but not zlib data"},
		{"altered payload", map[string]string{"KERNELBOT_PAYLOAD_SHA256": "00"}, nil, 65, "does not match its checksum"},
		{"step moved to another queue", map[string]string{"BUILDKITE_AGENT_META_DATA_QUEUE": "amd-mi300"}, nil, 65, "kbgen: refusing a re-routed step: it is for queue \"nvidia-l4\" but runs on an agent of queue \"amd-mi300\"\n"},
		{"step without a queue", map[string]string{"KERNELBOT_QUEUE": ""}, nil, 65, "refusing a step that names no queue (KERNELBOT_QUEUE)"},
		{"runner not a binary", nil, []string{"--runner-binary", notStatic}, 75, "is not a Linux executable"},
		{"runner dynamic", nil, []string{"--runner-binary", "/bin/sh"}, 75, "is dynamically linked; build kbgen with CGO_ENABLED=0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := sandboxEnv(t)
			for k, v := range tt.change {
				env[k] = v
			}
			args := append([]string{"sandbox", "--stage-dir", t.TempDir(), "--out-dir", t.TempDir()}, tt.args...)
			if tt.args == nil {
				args = append(args, "--dry-run")
			}
			r := runKbgen(t, env, "", append(args, "--", "kbgen", "run")...)
			if r.code != tt.code || !strings.Contains(r.stderr, tt.want) {
				t.Errorf("exit %d, stderr %q; want exit %d mentioning %q", r.code, r.stderr, tt.code, tt.want)
			}
			if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 {
				t.Errorf("error is %d lines, want one:\n%s", n+1, r.stderr)
			}
			if r.stdout != "" {
				t.Errorf("refused run printed to stdout: %q", r.stdout)
			}
		})
	}
}
