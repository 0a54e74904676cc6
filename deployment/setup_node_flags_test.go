package deployment

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// TestSetupNodeTokenFromFileOrStdin: the token comes from a file or
// stdin, never from the environment (the documented `sudo VAR=...`
// one-liner put it on sudo's command line), and is never printed.
func TestSetupNodeTokenFromFileOrStdin(t *testing.T) {
	t.Parallel()
	t.Run("environment refused", func(t *testing.T) {
		t.Parallel()
		e := newSetupEnv(t)
		e.nvidiaReady()
		delete(e.vars, "TOKEN_FILE")
		e.vars["BUILDKITE_AGENT_TOKEN"] = agentToken
		out, code := e.run("--check-only")
		if code != 1 || strings.Contains(out, agentToken) {
			t.Errorf("exit %d, want 1 without printing the token:\n%s", code, out)
		}
		wantLines(t, out, "missing: BUILDKITE_AGENT_TOKEN: do not pass the token in the environment")
	})
	t.Run("stdin", func(t *testing.T) {
		t.Parallel()
		e := newSetupEnv(t)
		e.nvidiaReady()
		delete(e.vars, "TOKEN_FILE")
		out, code := e.runStdin(agentToken+"\n", "--token-file", "-")
		if code != 0 || strings.Contains(out, agentToken) {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		wantLines(t, out, "ok:      agent token read from stdin")
		data, err := os.ReadFile(filepath.Join(e.vars["ROOT"], "etc/buildkite-agent/kbgen/token.env"))
		if err != nil || string(data) != "BUILDKITE_AGENT_TOKEN="+agentToken+"\n" {
			t.Errorf("token.env: %v %q", err, data)
		}
	})
	t.Run("empty stdin", func(t *testing.T) {
		t.Parallel()
		e := newSetupEnv(t)
		e.nvidiaReady()
		delete(e.vars, "TOKEN_FILE")
		out, code := e.runStdin("", "--check-only", "--token-file", "-")
		if code != 1 {
			t.Errorf("exit %d:\n%s", code, out)
		}
		wantLines(t, out, "missing: --token-file -: stdin held no token")
	})
}

// runStdin is run with stdin.
func (e *setupEnv) runStdin(stdin string, args ...string) (string, int) {
	e.t.Helper()
	cmd := exec.Command("../deployment/setup-node.sh", args...)
	cmd.Env = []string{"PATH=" + e.bin, "HOME=" + e.dir, "TMPDIR=" + e.dir}
	for k, v := range e.vars {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		e.t.Fatal(err)
	}
	return string(out), 0
}

// TestSetupNodeFixtureStaged: off a node (no nvidia-smi, docker or
// toolkit), setup-node.sh stages a fixture machine of node/testdata with
// a shape; re-run without the shape, its agent is stale and removed. A
// fixture never goes onto the real root.
func TestSetupNodeFixtureStaged(t *testing.T) {
	t.Parallel()
	e := newSetupEnv(t)
	e.vars["KBGEN_BINARY"], e.vars["ALLOW_UNSIGNED"] = kbgenbin.Path(t), "1"
	e.vars["TOKEN_FILE"] = e.write("agent-token", agentToken+"\n", 0o600)
	root := e.vars["ROOT"]
	out, code := e.run("--fixture", "../node/testdata/h100x8", "--queue", "nvidia-h100", "--shape", "nvidia-h100x8")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	wantLines(t, out, "ok:      fixture machine ../node/testdata/h100x8 (nvidia;", "9 agents for queue nvidia-h100",
		"created      -rw-r--r-- /etc/buildkite-agent/kbgen/gpux8-0/agent.env", "== staged under "+root)
	delete(e.vars, "TOKEN_FILE")
	out, code = e.run("--fixture", "../node/testdata/h100x8", "--queue", "nvidia-h100")
	if code != 0 {
		t.Fatalf("re-run exit %d:\n%s", code, out)
	}
	wantLines(t, out, "stale        /etc/buildkite-agent/kbgen/gpux8-0: agent gpux8-0 is not in the plan", "removed      /etc/buildkite-agent/kbgen/gpux8-0")
	if _, err := os.Stat(filepath.Join(root, "etc/buildkite-agent/kbgen/gpux8-0")); err == nil {
		t.Error("the stale shape agent's files are still there")
	}

	// The rehearsal --help prints, as printed: no token needed.
	e.vars["ROOT"] = filepath.Join(e.dir, "stage")
	out, code = e.run("--fixture", "../node/testdata/h100x8", "--queue", "nvidia-h100", "--shape", "nvidia-h100x8")
	if code != 0 {
		t.Errorf("the rehearsal without a token: exit %d:\n%s", code, out)
	}
	wantLines(t, out, "note:    no agent token: a rehearsal", "9 agents for queue nvidia-h100")

	delete(e.vars, "ROOT")
	out, code = e.run("--check-only", "--fixture", "../node/testdata/h100x8", "--queue", "nvidia-h100")
	if code != 1 {
		t.Errorf("a fixture on the real root: exit %d:\n%s", code, out)
	}
	wantLines(t, out, "missing: --fixture: plans for another machine; stage it (ROOT=DIR)")
}

// TestSetupNodeShapeAndMIGAgents: --shape (an alias resolves) and
// --mig-queue reach kbgen node install, every agent's unit is enabled
// (shape and MIG ones too), and re-running with other options disables
// the units of the agents the plan dropped and removes their files. A
// mistyped queue (SHAPES) fails the run before anything is started.
func TestSetupNodeShapeAndMIGAgents(t *testing.T) {
	t.Parallel()
	e := newSetupEnvBox(t, "h100x8")
	e.nvidiaReady()
	for name, file := range map[string]string{"smi.csv": "nvidia-smi.csv", "topo.txt": "nvidia-smi-topo.txt", "mig.txt": "nvidia-smi-mig.txt"} {
		data, err := os.ReadFile("../node/testdata/h100x8/" + file)
		if err != nil {
			t.Fatal(err)
		}
		e.write(name, string(data), 0o644)
	}
	e.stub("nvidia-smi", `case "$1" in
  -L) cat "$HOME/mig.txt" ;;
  --query-gpu=*) cat "$HOME/smi.csv" ;;
  topo) cat "$HOME/topo.txt" ;;
  *) exit 9 ;;
esac`)
	e.vars["QUEUE"] = "nvidia-h100"
	log := e.systemStubs()
	root := e.vars["ROOT"]

	e.vars["SHAPES"] = "nvidia-h100x4"
	out, code := e.run()
	if code == 0 || !strings.Contains(out, `unknown queue "nvidia-h100x4"`) {
		t.Fatalf("a mistyped SHAPES queue: exit %d:\n%s", code, out)
	}
	if calls := readCalls(t, log); slices.ContainsFunc(calls, func(c string) bool { return strings.HasPrefix(c, "systemctl enable") }) {
		t.Errorf("a refused install still enabled agents: %q", calls)
	}
	delete(e.vars, "SHAPES")

	out, code = e.run("--shape", "h100x8")
	if code != 0 {
		t.Fatalf("--shape: exit %d:\n%s", code, out)
	}
	calls := readCalls(t, log)
	if !slices.ContainsFunc(calls, func(c string) bool {
		return strings.HasPrefix(c, "systemctl enable --now buildkite-agent-gpu@0.service") && strings.HasSuffix(c, " buildkite-agent-gpu@7.service buildkite-agent-gpu@x8-0.service")
	}) {
		t.Errorf("the shape agent's unit was not enabled: %q", calls)
	}

	// The documented update, now with MIG on GPU 0 instead of the shape.
	out, code = e.run("--mig-queue", "nvidia-h100-mig")
	if code != 0 {
		t.Fatalf("--mig-queue: exit %d:\n%s", code, out)
	}
	calls = readCalls(t, log)
	for _, want := range []string{"systemctl disable --now buildkite-agent-gpu@x8-0.service", "systemctl disable --now buildkite-agent-gpu@0.service"} {
		if !hasCall(calls, want) {
			t.Errorf("no %q: %q", want, calls)
		}
	}
	if !slices.ContainsFunc(calls, func(c string) bool {
		return strings.HasPrefix(c, "systemctl enable --now buildkite-agent-gpu@0-mig0.service") && !strings.Contains(c, "@x8-0")
	}) {
		t.Errorf("the MIG agents' units were not enabled: %q", calls)
	}
	for _, id := range []string{"gpux8-0", "gpu0"} {
		if _, err := os.Stat(filepath.Join(root, "etc/buildkite-agent/kbgen", id)); err == nil {
			t.Errorf("stale agent %s's files are still there", id)
		}
	}
	wantLines(t, out, "removed      /etc/buildkite-agent/kbgen/gpux8-0", "== 14 agents enabled for queue nvidia-h100")
}

// release lays out a release as scripts/release.sh names it (kbgen,
// kbgen-nvml and kbgen-e2e of one version, SHA256SUMS) in e.dir/dist,
// signed with a throwaway key that e's allowed-signers file lists.
func (e *setupEnv) release() (dist string) {
	e.t.Helper()
	ssh, err := exec.LookPath("ssh-keygen")
	if err != nil {
		e.t.Skip("SKIP: ssh-keygen (openssh-client) is not installed: release verification not tested")
	}
	if err := os.Symlink(ssh, filepath.Join(e.bin, "ssh-keygen")); err != nil {
		e.t.Fatal(err)
	}
	dist = filepath.Join(e.dir, "dist")
	kbgen, err := os.ReadFile(kbgenbin.Path(e.t))
	if err != nil {
		e.t.Fatal(err)
	}
	e.write("dist/kbgen-v9.9.9-linux-amd64", string(kbgen), 0o755)
	e.write("dist/kbgen-nvml-v9.9.9-linux-amd64", "#!/bin/sh\nexit 1\n", 0o755)
	e.write("dist/kbgen-e2e-v9.9.9-linux-amd64", "#!/bin/sh\necho e2e\n", 0o755)
	sh := func(script string) {
		cmd := exec.Command("bash", "-c", script)
		cmd.Dir = e.dir
		if out, err := cmd.CombinedOutput(); err != nil {
			e.t.Fatalf("%s: %v\n%s", script, err, out)
		}
	}
	sh(`cd dist && sha256sum -- kbgen-* > SHA256SUMS
ssh-keygen -q -t ed25519 -N '' -C kbgen-release -f ../release-key
ssh-keygen -q -Y sign -f ../release-key -n kbgen-release SHA256SUMS
printf 'kbgen-release namespaces="kbgen-release" %s\n' "$(cut -d' ' -f1,2 ../release-key.pub)" > ../allowed_signers`)
	e.vars["KBGEN_ALLOWED_SIGNERS"] = filepath.Join(e.dir, "allowed_signers")
	e.vars["KBGEN_BINARY"] = filepath.Join(dist, "kbgen-v9.9.9-linux-amd64")
	delete(e.vars, "ALLOW_UNSIGNED")
	return dist
}

// TestSetupNodeSignedRelease: a release binary installs only when its
// SHA256SUMS verifies (ssh-keygen -Y verify against the allowed signers,
// offline) and lists it; kbgen-nvml-VERSION-… and kbgen-e2e-VERSION-…
// beside it are installed as kbgen-nvml and kbgen-e2e (they were looked
// for as plain kbgen-nvml before, and kbgen-e2e not at all).
func TestSetupNodeSignedRelease(t *testing.T) {
	t.Parallel()
	t.Run("signed", func(t *testing.T) {
		t.Parallel()
		e := newSetupEnv(t)
		e.nvidiaReady()
		dist := e.release()
		out, code := e.run()
		if code != 0 {
			t.Fatalf("exit %d:\n%s", code, out)
		}
		root := e.vars["ROOT"]
		wantLines(t, out, "ok:      kbgen release "+e.vars["KBGEN_BINARY"]+": SHA256SUMS signed by ",
			"installed    "+root+"/usr/local/bin/kbgen-nvml", "installed    "+root+"/usr/local/bin/kbgen-e2e")
		for src, dst := range map[string]string{"kbgen-nvml-v9.9.9-linux-amd64": "kbgen-nvml", "kbgen-e2e-v9.9.9-linux-amd64": "kbgen-e2e"} {
			want, _ := os.ReadFile(filepath.Join(dist, src))
			got, err := os.ReadFile(filepath.Join(root, "usr/local/bin", dst))
			if err != nil || string(got) != string(want) {
				t.Errorf("%s: %v, not the release's %s", dst, err, src)
			}
		}
	})
	for _, tc := range []struct {
		name  string
		spoil func(e *setupEnv, dist string)
		want  string
	}{
		{"a file changed after signing", func(e *setupEnv, dist string) {
			e.write("dist/kbgen-e2e-v9.9.9-linux-amd64", "#!/bin/sh\necho changed\n", 0o755)
		}, "kbgen-e2e-v9.9.9-linux-amd64 is not in the signed SHA256SUMS with its hash"},
		{"a key the allowed signers do not list", func(e *setupEnv, _ string) {
			e.vars["KBGEN_ALLOWED_SIGNERS"] = e.write("other_signers", "kbgen-release namespaces=\"kbgen-release\" ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIIfakeFakeFakeFakeFakeFakeFakeFakeFakeFakeFake0\n", 0o644)
		}, "SHA256SUMS.sig does not verify against"},
		{"unsigned", func(_ *setupEnv, dist string) { os.Remove(filepath.Join(dist, "SHA256SUMS.sig")) },
			"no SHA256SUMS and SHA256SUMS.sig beside it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := newSetupEnv(t)
			e.nvidiaReady()
			dist := e.release()
			tc.spoil(e, dist)
			out, code := e.run("--check-only")
			if code != 1 {
				t.Errorf("exit %d, want 1:\n%s", code, out)
			}
			wantLines(t, out, "missing: KBGEN_BINARY: "+e.vars["KBGEN_BINARY"]+" is not a verified release: "+tc.want, "set ALLOW_UNSIGNED=1 for your own build")
			e.vars["ALLOW_UNSIGNED"] = "1"
			out, code = e.run("--check-only")
			if code != 0 {
				t.Errorf("ALLOW_UNSIGNED=1: exit %d:\n%s", code, out)
			}
			wantLines(t, out, "WARNING: kbgen binary "+e.vars["KBGEN_BINARY"]+" is NOT a verified release")
		})
	}
}

// TestSetupNodeAptKeyFingerprint: the key fetched for Buildkite's apt
// repository must have Buildkite's published fingerprint; another key
// is deleted and nothing is installed from the repository.
func TestSetupNodeAptKeyFingerprint(t *testing.T) {
	t.Parallel()
	e := newSetupEnv(t)
	e.nvidiaReady()
	log := e.systemStubs()
	e.stub("curl", "echo 0123456789ABCDEF0123456789ABCDEF01234567")
	out, code := e.run()
	if code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, out)
	}
	wantLines(t, out, "error: the key fetched for Buildkite's apt repository has fingerprint 0123456789ABCDEF0123456789ABCDEF01234567, not 32A37959C2FA5C3C99EFBC32A79206696452D198")
	root := e.vars["ROOT"]
	for _, f := range []string{"usr/share/keyrings/buildkite-agent-archive-keyring.gpg", "etc/apt/sources.list.d/buildkite-agent.list"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			t.Errorf("%s kept after a wrong key", f)
		}
	}
	if calls := readCalls(t, log); hasCall(calls, "apt-get install -y buildkite-agent=3.52.1*") {
		t.Errorf("installed from a repository with the wrong key: %q", calls)
	}
}
