package deployment

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// The tools setup-node.sh uses besides the ones a test stubs. Tests run it
// with a PATH of only these (linked) and the stubs, so whatever the build
// machine has installed (docker, go, nvidia-smi) cannot leak in.
var systemTools = []string{"bash", "env", "sed", "cat", "id", "mktemp", "rm", "cp", "cmp", "install", "grep", "tee", "head", "wc", "tr", "dirname", "basename", "cut", "sha256sum", "mkdir", "chmod"}

type setupEnv struct {
	t     *testing.T
	dir   string
	bin   string
	vars  map[string]string
	sysfs string
}

func newSetupEnv(t *testing.T) *setupEnv {
	t.Helper()
	return newSetupEnvBox(t, "l40sx2")
}

// newSetupEnvBox is newSetupEnv on another fixture machine of node/testdata.
func newSetupEnvBox(t *testing.T, box string) *setupEnv {
	t.Helper()
	dir := t.TempDir()
	e := &setupEnv{t: t, dir: dir, bin: filepath.Join(dir, "bin"), vars: map[string]string{}}
	if err := os.MkdirAll(e.bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tool := range systemTools {
		p, err := exec.LookPath(tool)
		if err != nil {
			t.Skipf("%s not installed: setup-node.sh not tested", tool)
		}
		if err := os.Symlink(p, filepath.Join(e.bin, tool)); err != nil {
			t.Fatal(err)
		}
	}
	// A sysfs with cgroup v2, holding the box (2xL40S) for kbgen node install.
	e.sysfs = filepath.Join(dir, "sys")
	if err := os.CopyFS(e.sysfs, os.DirFS("../node/testdata/"+box+"/sys")); err != nil {
		t.Fatal(err)
	}
	e.write("sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory pids\n", 0o644)
	e.vars["KBGEN_SYSFS"] = e.sysfs
	e.vars["KBGEN_DEV"] = filepath.Join(dir, "dev")
	e.vars["ROOT"] = filepath.Join(dir, "root")
	return e
}

func (e *setupEnv) write(rel, content string, mode os.FileMode) string {
	e.t.Helper()
	p := filepath.Join(e.dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		e.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), mode); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// stub puts an executable shell script named name on the PATH.
func (e *setupEnv) stub(name, body string) {
	e.write("bin/"+name, "#!/bin/bash\n"+body+"\n", 0o755)
}

// nvidiaReady stubs a healthy NVIDIA node: driver, docker, toolkit.
func (e *setupEnv) nvidiaReady() {
	smi, err := os.ReadFile("../node/testdata/l40sx2/nvidia-smi.csv")
	if err != nil {
		e.t.Fatal(err)
	}
	csv := e.write("smi.csv", string(smi), 0o644)
	e.stub("nvidia-smi", fmt.Sprintf(`case "$1" in
  -L) echo "GPU 0: NVIDIA L40S (UUID: GPU-9c3e0000-77aa-1c2d-8e9f-0b1d2c3e0000)"; echo "GPU 1: NVIDIA L40S (UUID: GPU-9c3e2222-77aa-1c2d-8e9f-0b1d2c3e0001)" ;;
  --query-gpu=*) cat %q ;;
  *) exit 9 ;;
esac`, csv))
	e.stub("docker", `[ "$1" = info ] && exit 0; exit 9`)
	e.stub("nvidia-ctk", `echo "NVIDIA Container Toolkit CLI version 1.17.3"`)
	e.vars["QUEUE"] = "nvidia-l40s"
	e.vars["TOKEN_FILE"] = e.write("agent-token", agentToken+"\n", 0o600)
	e.vars["KBGEN_BINARY"] = kbgenbin.Path(e.t)
	// The test's own build: no signed SHA256SUMS beside it.
	e.vars["ALLOW_UNSIGNED"] = "1"
}

// agentToken is the token the tests install; it must never be printed.
const agentToken = "secret-agent-token-4f9a2c"

func (e *setupEnv) run(args ...string) (string, int) {
	e.t.Helper()
	cmd := exec.Command("../deployment/setup-node.sh", args...)
	cmd.Env = []string{"PATH=" + e.bin, "HOME=" + e.dir, "TMPDIR=" + e.dir}
	for k, v := range e.vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return string(out), code
}

func wantLines(t *testing.T, out string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("output lacks %q:\n%s", w, out)
		}
	}
}

func TestSetupNodePrerequisites(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		setup    func(e *setupEnv)
		code     int
		want     []string
		missingN int
	}{
		{
			name:  "bare machine",
			setup: func(e *setupEnv) { os.Remove(filepath.Join(e.sysfs, "fs/cgroup/cgroup.controllers")) },
			code:  1,
			want: []string{
				"missing: --queue: name the Buildkite queue",
				"missing: --token-file: the agent token of your Buildkite cluster",
				"missing: GPU driver: no nvidia-smi and no " + "", // path varies
				"missing: docker: install Docker Engine",
				"missing: cgroup v2: ",
				"missing: kbgen: install Go 1.26",
				"== 6 prerequisites missing",
			},
		},
		{
			name:  "NVIDIA node ready",
			setup: func(e *setupEnv) { e.nvidiaReady() },
			want: []string{"ok:      NVIDIA driver: 2 GPUs", "ok:      docker engine", "ok:      NVIDIA container toolkit",
				"ok:      cgroup v2", "== all prerequisites present"},
		},
		{
			name:  "no container toolkit",
			setup: func(e *setupEnv) { e.nvidiaReady(); os.Remove(filepath.Join(e.bin, "nvidia-ctk")) },
			code:  1,
			want:  []string{"missing: NVIDIA container toolkit: apt-get install nvidia-container-toolkit", "== 1 prerequisites missing"},
		},
		{
			name: "driver broken",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				e.stub("nvidia-smi", `echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."; exit 9`)
			},
			code: 1,
			want: []string{"missing: GPU driver: nvidia-smi is installed but fails (NVIDIA-SMI has failed"},
		},
		{
			name:  "docker down",
			setup: func(e *setupEnv) { e.nvidiaReady(); e.stub("docker", "exit 1") },
			code:  1,
			want:  []string{"missing: docker: installed but the engine does not answer"},
		},
		{
			name: "AMD node ready",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				os.Remove(filepath.Join(e.bin, "nvidia-smi"))
				e.write("dev/kfd", "", 0o644)
				e.write("dev/dri/renderD128", "", 0o644)
				e.write("dev/dri/renderD129", "", 0o644)
			},
			want: []string{"ok:      ROCm driver: ", "ok:      ROCm devices: ", "and 2 render nodes", "== all prerequisites present"},
		},
		{
			name: "AMD without render nodes",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				os.Remove(filepath.Join(e.bin, "nvidia-smi"))
				e.write("dev/kfd", "", 0o644)
			},
			code: 1,
			want: []string{"missing: ROCm devices: no ", "is the amdgpu driver loaded"},
		},
		{
			name: "not root on the real root",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				delete(e.vars, "ROOT")
				os.Remove(filepath.Join(e.bin, "id"))
				e.stub("id", "echo 1000")
			},
			code: 1,
			want: []string{"missing: root: run with sudo"},
		},
		{
			name: "agent v3.50.1 never sees a cancel",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				e.stub("buildkite-agent", `[ "$1" = --version ] && echo "buildkite-agent version 3.50.1, build 9"; [ "$1" = start ] && echo "   --job-verification-jwks-path value   Path"; exit 0`)
			},
			code: 1,
			want: []string{"missing: buildkite-agent: version 3.50.1 is older than 3.50.2 (a running job would never see a cancel or its timeout); install 3.52.1"},
		},
		{
			name: "agent without a version",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				e.stub("buildkite-agent", `exit 0`)
			},
			code: 1,
			want: []string{"missing: buildkite-agent: version unknown is older than 3.50.2"},
		},
		{
			name: "agent too old to verify signatures",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				e.vars["VERIFICATION_KEY"] = e.write("key.jwks", `{"keys":[]}`, 0o644)
				e.stub("buildkite-agent", `[ "$1" = --version ] && echo "buildkite-agent version 3.50.4"; [ "$1" = start ] && echo "   --spawn value   The number of agents"; exit 0`)
			},
			code: 1,
			want: []string{"missing: buildkite-agent: 3.50.4 cannot verify signed pipelines (no --job-verification-jwks-path)"},
		},
		{
			name: "agent verifies signatures",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				e.vars["VERIFICATION_KEY"] = e.write("key.jwks", `{"keys":[]}`, 0o644)
				e.stub("buildkite-agent", `[ "$1" = --version ] && echo "buildkite-agent version 3.52.1, build 8"; [ "$1" = start ] && echo "   --job-verification-jwks-path value   Path to a file"; exit 0`)
			},
			want: []string{"ok:      buildkite-agent ", " 3.52.1\n", "== all prerequisites present"},
		},
		{
			name: "another agent version says what kbgen is tested with",
			setup: func(e *setupEnv) {
				e.nvidiaReady()
				e.stub("buildkite-agent", `[ "$1" = --version ] && echo "buildkite-agent version 3.60.0, build 8"; exit 0`)
			},
			want: []string{"3.60.0 (kbgen is tested with 3.52.1;", "== all prerequisites present"},
		},
		{
			name:  "unreadable verification key",
			setup: func(e *setupEnv) { e.nvidiaReady(); e.vars["VERIFICATION_KEY"] = "/nonexistent.jwks" },
			code:  1,
			want:  []string{"missing: VERIFICATION_KEY: /nonexistent.jwks is not a readable file"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newSetupEnv(t)
			tt.setup(e)
			out, code := e.run("--check-only")
			if code != tt.code {
				t.Errorf("exit %d, want %d:\n%s", code, tt.code, out)
			}
			wantLines(t, out, tt.want...)
			if strings.Contains(out, agentToken) {
				t.Errorf("token printed:\n%s", out)
			}
			if _, err := os.Stat(e.vars["ROOT"]); err == nil {
				t.Errorf("--check-only wrote %s", e.vars["ROOT"])
			}
		})
	}
}

func TestSetupNodeStagingIdempotent(t *testing.T) {
	t.Parallel()
	e := newSetupEnv(t)
	e.nvidiaReady()
	root := e.vars["ROOT"]
	out, code := e.run("--dry-run")
	if code != 0 {
		t.Fatalf("dry run without a helper: exit %d:\n%s", code, out)
	}
	wantLines(t, out, "skipped      "+root+"/usr/local/bin/kbgen-nvml (set KBGEN_NVML_BINARY")
	e.vars["KBGEN_NVML_BINARY"] = e.write("prebuilt/kbgen-nvml", "#!/bin/sh\nexit 1\n", 0o755)

	out, code = e.run("--dry-run")
	if code != 0 {
		t.Fatalf("dry run exit %d:\n%s", code, out)
	}
	wantLines(t, out, "would install "+root+"/usr/local/bin/kbgen", "would install "+root+"/usr/local/bin/kbgen-nvml", "would create -rw------- /etc/buildkite-agent/kbgen/token.env")
	if _, err := os.Stat(root); err == nil {
		t.Fatalf("--dry-run wrote %s", root)
	}

	out, code = e.run()
	if code != 0 {
		t.Fatalf("first run exit %d:\n%s", code, out)
	}
	wantLines(t, out, "installed    "+root+"/usr/local/bin/kbgen", "installed    "+root+"/usr/local/bin/kbgen-nvml",
		"created      -rwxr-xr-x /etc/buildkite-agent/kbgen/gpu1/hooks/environment",
		"2 agents for queue nvidia-l40s", "== staged under "+root+"; nothing started")
	hook, err := os.ReadFile(filepath.Join(root, "etc/buildkite-agent/kbgen/gpu1/hooks/environment"))
	if err != nil || !strings.Contains(string(hook), "export KERNELBOT_CPUSET=4-6,12-14\nexport KERNELBOT_MEMS=0\nexport KERNELBOT_MEMORY=126g\nexport KERNELBOT_CGROUP_PARENT=kbgen-jobs.slice\n") {
		t.Errorf("hook: %v\n%s", err, hook)
	}
	tok := filepath.Join(root, "etc/buildkite-agent/kbgen/token.env")
	fi, err := os.Stat(tok)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file: %v %v", fi, err)
	}
	data, _ := os.ReadFile(tok)
	if string(data) != "BUILDKITE_AGENT_TOKEN="+agentToken+"\n" {
		t.Errorf("token file holds %q", data)
	}

	// The second run, even without the token (it is installed), changes nothing.
	delete(e.vars, "TOKEN_FILE")
	out, code = e.run()
	if code != 0 {
		t.Fatalf("second run exit %d:\n%s", code, out)
	}
	wantLines(t, out, "ok:      agent token already installed", "unchanged    "+root+"/usr/local/bin/kbgen", "unchanged    "+root+"/usr/local/bin/kbgen-nvml")
	if m := regexp.MustCompile(`(?m)^(created|updated|installed) .*`).FindAllString(out, -1); len(m) > 0 {
		t.Errorf("second run changed files: %q", m)
	}
	if strings.Contains(out, "secret-agent-token") {
		t.Errorf("token printed:\n%s", out)
	}
}

func TestSetupNodeUsage(t *testing.T) {
	t.Parallel()
	e := newSetupEnv(t)
	out, code := e.run("--bogus")
	if code != 2 || !strings.Contains(out, "unknown argument: --bogus") {
		t.Errorf("exit %d:\n%s", code, out)
	}
	out, code = e.run("--help")
	if code != 0 || !strings.Contains(out, "sudo ./deployment/setup-node.sh --queue nvidia-h100 --token-file /root/agent-token") || strings.Contains(out, "set -euo") {
		t.Errorf("exit %d:\n%s", code, out)
	}
}

// systemStubs stands in for the commands setup-node.sh runs on a real
// node (systemctl, package and user management), recording each call.
func (e *setupEnv) systemStubs() string {
	log := filepath.Join(e.dir, "calls.log")
	state := filepath.Join(e.dir, "state")
	os.MkdirAll(state, 0o755)
	rec := fmt.Sprintf(`echo "${0##*/} $*" >> %q`, log)
	os.Remove(filepath.Join(e.bin, "id"))
	e.stub("id", rec+fmt.Sprintf(`
case "$*" in
  -u) echo 0 ;;
  "-u buildkite-agent") [ -e %[1]q/user ] ;;
  "-nG buildkite-agent") if [ -e %[1]q/docker ]; then echo "buildkite-agent docker"; else echo buildkite-agent; fi ;;
  *) exit 1 ;;
esac`, state))
	e.stub("useradd", rec+fmt.Sprintf("\n: > %q/user", state))
	e.stub("usermod", rec+fmt.Sprintf("\n: > %q/docker", state))
	// The package's own unit is enabled until disabled.
	e.stub("systemctl", rec+fmt.Sprintf(`
case "$1" in
  is-enabled) [ ! -e %[1]q/pkg-disabled ] ;;
  disable) [ "$3" = buildkite-agent.service ] && : > %[1]q/pkg-disabled; exit 0 ;;
esac`, state))
	e.stub("apt-get", rec)
	// gpg --dearmor writes the key; --show-keys answers as gpg does, with
	// the fingerprint the key file holds.
	e.stub("gpg", rec+`
if [ "$1" = --show-keys ]; then printf 'pub:-:255:22:A79206696452D198:1:::-:::scESC::::::23::0:\nfpr:::::::::%s:\n' "$(cat "$3")"; exit 0; fi
while [ $# -gt 0 ]; do [ "$1" = -o ] && cat > "$2"; shift; done`)
	e.stub("curl", rec+"\necho 32A37959C2FA5C3C99EFBC32A79206696452D198")
	e.vars["MANAGE_SYSTEM"] = "1"
	return log
}

func readCalls(t *testing.T, log string) []string {
	t.Helper()
	data, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(log)
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}

func hasCall(calls []string, want string) bool {
	for _, c := range calls {
		if c == want {
			return true
		}
	}
	return false
}

// TestSetupNodeManagesSystem runs the system half (packages, user,
// systemctl) against stubs: first install, an idempotent second run, and a
// GPU that disappeared.
func TestSetupNodeManagesSystem(t *testing.T) {
	t.Parallel()
	e := newSetupEnv(t)
	e.nvidiaReady()
	log := e.systemStubs()
	root := e.vars["ROOT"]

	out, code := e.run()
	if code != 0 {
		t.Fatalf("first run exit %d:\n%s", code, out)
	}
	calls := readCalls(t, log)
	for _, want := range []string{
		"apt-get install -y buildkite-agent=3.52.1*",
		"systemctl disable --now buildkite-agent.service",
		"useradd --system --create-home --home-dir /var/lib/buildkite-agent --shell /usr/sbin/nologin buildkite-agent",
		"usermod -aG docker buildkite-agent",
		"systemctl daemon-reload",
		"systemctl enable --now buildkite-agent-gpu@0.service buildkite-agent-gpu@1.service",
		"systemctl try-restart --no-block buildkite-agent-gpu@0.service buildkite-agent-gpu@1.service",
	} {
		if !hasCall(calls, want) {
			t.Errorf("first run did not call %q; calls:\n%s", want, strings.Join(calls, "\n"))
		}
	}
	if _, err := os.Stat(filepath.Join(root, "etc/apt/sources.list.d/buildkite-agent.list")); err != nil {
		t.Errorf("apt source not written: %v", err)
	}
	wantLines(t, out, "== 2 agents enabled for queue nvidia-l40s")

	// Second run: the agent is installed now, nothing changed.
	e.stub("buildkite-agent", `[ "$1" = --version ] && echo "buildkite-agent version 3.52.1, build 8"; exit 0`)
	out, code = e.run()
	if code != 0 {
		t.Fatalf("second run exit %d:\n%s", code, out)
	}
	calls = readCalls(t, log)
	for _, c := range calls {
		for _, bad := range []string{"apt-get", "useradd", "usermod", "try-restart", "systemctl disable"} {
			if strings.HasPrefix(c, bad) {
				t.Errorf("second run called %q", c)
			}
		}
	}
	if !hasCall(calls, "systemctl enable --now buildkite-agent-gpu@0.service buildkite-agent-gpu@1.service") {
		t.Errorf("second run did not (idempotently) enable the agents: %q", calls)
	}

	// An agent of a GPU that is gone is disabled and its files removed.
	stale := filepath.Join(root, "etc/buildkite-agent/kbgen/gpu5")
	os.MkdirAll(stale, 0o755)
	out, code = e.run()
	if code != 0 {
		t.Fatalf("third run exit %d:\n%s", code, out)
	}
	calls = readCalls(t, log)
	if !hasCall(calls, "systemctl disable --now buildkite-agent-gpu@5.service") {
		t.Errorf("stale agent not disabled: %q", calls)
	}
	if _, err := os.Stat(stale); err == nil {
		t.Error("stale agent directory left")
	}
	wantLines(t, out, "removed      /etc/buildkite-agent/kbgen/gpu5")
}
