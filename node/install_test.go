package node

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/golden"
)

func updateGolden() bool { return golden.Update() }

const fakeToken = "fake-agent-token-0123456789abcdef"

func renderFixture(t *testing.T, box, queue string, withSecrets bool) []File {
	t.Helper()
	p := planFixture(t, box, defaultOpts)
	opts := InstallOptions{Queue: queue}
	if withSecrets {
		opts.Token = fakeToken
		jwks, err := os.ReadFile("testdata/verification.jwks")
		if err != nil {
			t.Fatal(err)
		}
		opts.VerificationJWKS = jwks
	}
	files, err := Render(p, opts)
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestRenderGolden compares every rendered file with golden/node/<box>/
// (UPDATE_GOLDEN=1 rewrites them).
func TestRenderGolden(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ box, queue string }{
		{"h100x8", "nvidia-h100"}, {"l40sx2", "nvidia-l40s"}, {"mi300xx8", "amd-mi300"},
	} {
		t.Run(tt.box, func(t *testing.T) {
			t.Parallel()
			files := renderFixture(t, tt.box, tt.queue, tt.box == "h100x8")
			dir := filepath.Join("..", "golden", "node", tt.box)
			if updateGolden() {
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				if _, err := Apply(dir, files, false); err != nil {
					t.Fatal(err)
				}
			}
			seen := map[string]bool{}
			for _, f := range files {
				seen[filepath.FromSlash(strings.TrimPrefix(f.Path, "/"))] = true
				want, err := os.ReadFile(filepath.Join(dir, f.Path))
				if err != nil {
					t.Errorf("%v (UPDATE_GOLDEN=1 go test ./node writes it)", err)
					continue
				}
				if !bytes.Equal(f.Data, want) {
					t.Errorf("%s differs from golden:\n%s", f.Path, f.Data)
				}
			}
			// No stale golden file survives a rendering change.
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && !d.IsDir() {
					rel, _ := filepath.Rel(dir, p)
					if !seen[rel] {
						t.Errorf("golden file %s is no longer rendered", rel)
					}
				}
				return nil
			})
		})
	}
}

func TestRenderContents(t *testing.T) {
	t.Parallel()
	files := renderFixture(t, "h100x8", "nvidia-h100", true)
	get := func(p string) File {
		for _, f := range files {
			if f.Path == p {
				return f
			}
		}
		t.Fatalf("%s not rendered", p)
		return File{}
	}
	cfg := string(get("/etc/buildkite-agent/kbgen/gpu3/buildkite-agent.cfg").Data)
	for _, want := range []string{
		`name="%hostname-gpu3"`,
		`tags="queue=nvidia-h100,gpu-index=3"`,
		`build-path="/var/lib/buildkite-agent/kbgen/gpu3/builds"`,
		`hooks-path="/etc/buildkite-agent/kbgen/gpu3/hooks"`,
		`plugins-path="/var/lib/buildkite-agent/kbgen/gpu3/plugins"`,
		"spawn=1\n",
		"kbgen step\n# signature does not verify with /etc/buildkite-agent/kbgen/verification.jwks",
	} {
		if !strings.Contains(cfg, want) {
			t.Errorf("gpu3 config lacks %q:\n%s", want, cfg)
		}
	}
	hook := get("/etc/buildkite-agent/kbgen/gpu3/hooks/environment")
	if hook.Mode != 0o755 {
		t.Errorf("hook mode %v", hook.Mode)
	}
	for _, want := range []string{
		"export KERNELBOT_GPU_INDEX=3\n",
		"export KERNELBOT_GPU_UUID=GPU-5a1c3333-4c1e-2f6a-9d0b-e3f1a2b40003\n",
		"export KERNELBOT_CPUSET=40-52,152-164\n",
		"export KERNELBOT_MEMS=0\n",
		"export KERNELBOT_MEMORY=247g\n",
		"export NVIDIA_VISIBLE_DEVICES=GPU-5a1c3333-4c1e-2f6a-9d0b-e3f1a2b40003\n",
		"export CUDA_VISIBLE_DEVICES=GPU-5a1c3333-4c1e-2f6a-9d0b-e3f1a2b40003\n",
	} {
		if !strings.Contains(string(hook.Data), want) {
			t.Errorf("gpu3 hook lacks %q:\n%s", want, hook.Data)
		}
	}
	// The token lives in exactly one file, root-only.
	for _, f := range files {
		has := bytes.Contains(f.Data, []byte(fakeToken))
		if f.Path == TokenFile {
			if !has || f.Mode != 0o600 {
				t.Errorf("token file: has token %v, mode %v", has, f.Mode)
			}
		} else if has {
			t.Errorf("token leaked into %s", f.Path)
		}
	}
	// Without a key there is no verification line; without a token no token file.
	for _, f := range renderFixture(t, "mi300xx8", "amd-mi300", false) {
		if f.Path == TokenFile || strings.Contains(string(f.Data), "verification.jwks") {
			t.Errorf("%s rendered without a token or key", f.Path)
		}
		if f.Path == "/etc/buildkite-agent/kbgen/gpu2/hooks/environment" {
			for _, want := range []string{"KERNELBOT_GPU_RENDER_NODE=/dev/dri/renderD130\n", "ROCR_VISIBLE_DEVICES=GPU-", "HIP_VISIBLE_DEVICES=0\n"} {
				if !strings.Contains(string(f.Data), want) {
					t.Errorf("AMD hook lacks %q:\n%s", want, f.Data)
				}
			}
			if strings.Contains(string(f.Data), "CUDA_VISIBLE") {
				t.Errorf("AMD hook sets CUDA_VISIBLE_DEVICES")
			}
		}
	}
}

func TestRenderRejects(t *testing.T) {
	t.Parallel()
	p := planFixture(t, "l40sx2", defaultOpts)
	for _, tt := range []struct {
		opts   InstallOptions
		option string // the OptionError's Option
	}{
		{InstallOptions{}, "Queue"},
		{InstallOptions{Queue: "a b"}, "Queue"},
		{InstallOptions{Queue: "q", Token: "tok en"}, "Token"},
		{InstallOptions{Queue: "q", Token: "x\ny"}, "Token"},
		{InstallOptions{Queue: "q", AgentBinary: "buildkite-agent"}, "AgentBinary"},
		{InstallOptions{Queue: "q", KbgenPath: "/opt/my kbgen"}, "KbgenPath"},
	} {
		_, err := Render(p, tt.opts)
		if !isOption(err, tt.option) {
			t.Errorf("Render(%+v) err = %v, want an OptionError for %s", tt.opts, err, tt.option)
		}
		// The text is the contract here: the token is a secret it must not hold.
		if err != nil && tt.opts.Token != "" && strings.Contains(err.Error(), tt.opts.Token) {
			t.Errorf("error echoes the token: %v", err)
		}
	}
}

type snap struct {
	mode  fs.FileMode
	mtime time.Time
	data  string
}

func snapshot(t *testing.T, root string) map[string]snap {
	t.Helper()
	out := map[string]snap{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		data, err := os.ReadFile(p)
		out[p] = snap{fi.Mode(), fi.ModTime(), string(data)}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestApplyIdempotent(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := renderFixture(t, "h100x8", "nvidia-h100", true)

	dry, err := Apply(root, files, true)
	if err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(root); len(entries) != 0 {
		t.Fatalf("dry run wrote %d entries", len(entries))
	}
	first, err := Apply(root, files, false)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range first {
		if r.Change != Created || dry[i] != r {
			t.Errorf("first install %s: %s (dry run said %s)", r.Path, r.Change, dry[i].Change)
		}
	}
	before := snapshot(t, root)
	if len(before) != len(files) {
		t.Fatalf("installed %d files, rendered %d", len(before), len(files))
	}
	// Older mtimes make any rewrite visible even on coarse clocks.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	for p := range before {
		os.Chtimes(p, old, old)
	}
	before = snapshot(t, root)

	second, err := Apply(root, files, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range second {
		if r.Change != Unchanged {
			t.Errorf("second install %s: %s, want unchanged", r.Path, r.Change)
		}
	}
	after := snapshot(t, root)
	if len(after) != len(before) {
		t.Errorf("second install left %d files, first %d", len(after), len(before))
	}
	for p, s := range before {
		if after[p] != s {
			t.Errorf("%s changed on the second install: %+v → %+v", p, s, after[p])
		}
	}
	tok := filepath.Join(root, TokenFile)
	if fi, err := os.Stat(tok); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("token file %v, %v", fi, err)
	}

	// A loosened secret and an edited config are put back; the rest stays.
	os.Chmod(tok, 0o644)
	cfg := filepath.Join(root, "etc/buildkite-agent/kbgen/gpu0/buildkite-agent.cfg")
	os.WriteFile(cfg, []byte("edited"), 0o644)
	third, err := Apply(root, files, false)
	if err != nil {
		t.Fatal(err)
	}
	var updated []string
	for _, r := range third {
		if r.Change == Updated {
			updated = append(updated, r.Path)
		}
	}
	if strings.Join(updated, " ") != TokenFile+" /etc/buildkite-agent/kbgen/gpu0/buildkite-agent.cfg" {
		t.Errorf("third install updated %v", updated)
	}
	if fi, _ := os.Stat(tok); fi.Mode().Perm() != 0o600 {
		t.Errorf("token mode %v after repair", fi.Mode())
	}
	// No temporary files are left behind.
	for p := range snapshot(t, root) {
		if strings.Contains(p, ".kbgen-") {
			t.Errorf("temporary file left: %s", p)
		}
	}
}

func TestApplyRefusesNonRegular(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	files := []File{{Path: "/etc/x", Mode: 0o644, Data: []byte("x")}}
	os.MkdirAll(filepath.Join(root, "etc/x"), 0o755)
	// The message is the contract: it tells the operator to move the path away.
	if _, err := Apply(root, files, false); err == nil || !strings.Contains(err.Error(), "exists and is not a regular file; move it away and re-run") {
		t.Fatalf("err = %v", err)
	}
}

func TestReadInstalledPlan(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	// The hint in the message is what the operator reads; the cause is a
	// plan file that does not exist.
	if _, err := ReadInstalledPlan(root); !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "run kbgen node install first") {
		t.Fatalf("err = %v", err)
	}
	if _, err := Apply(root, renderFixture(t, "mi300xx8", "amd-mi300", false), false); err != nil {
		t.Fatal(err)
	}
	p, err := ReadInstalledPlan(root)
	if err != nil {
		t.Fatal(err)
	}
	want := planFixture(t, "mi300xx8", defaultOpts)
	if len(p.Agents) != 8 || !reflect.DeepEqual(p.Agents[5], want.Agents[5]) || p.Runtime != contract.RuntimeROCm {
		t.Errorf("read back %+v", p)
	}
}

// TestSystemdVerify runs systemd-analyze verify on the rendered units.
func TestSystemdVerify(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed: rendered units not verified (apt-get install systemd)")
	}
	root := t.TempDir()
	// ExecStart must name an executable that exists for verify to pass.
	agent, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no `true` binary")
	}
	p := planFixture(t, "h100x8", defaultOpts)
	files, err := Render(p, InstallOptions{Queue: "nvidia-h100", AgentBinary: agent, KbgenPath: agent})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(root, files, false); err != nil {
		t.Fatal(err)
	}
	unitDir := filepath.Join(root, SystemdDir)
	// Verify an instance: the template itself cannot be verified.
	inst := filepath.Join(unitDir, InstanceName(3))
	if err := os.Symlink(UnitName, inst); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("systemd-analyze", "verify", "--man=no", inst, filepath.Join(unitDir, SliceName), filepath.Join(unitDir, JobsSlice))
	cmd.Env = append(os.Environ(), "SYSTEMD_UNIT_PATH="+unitDir+":")
	out, err := cmd.CombinedOutput()
	if err != nil && bytes.Contains(out, []byte("Failed to")) && bytes.Contains(out, []byte("bus")) {
		t.Skipf("systemd-analyze cannot run here: %s", out)
	}
	var problems []string
	for _, line := range strings.Split(string(out), "\n") {
		// Users, groups and docker.service do not exist on a build machine.
		if line == "" || strings.Contains(line, "docker.service") || strings.Contains(line, "network-online") {
			continue
		}
		problems = append(problems, line)
	}
	if err != nil || len(problems) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(problems, "\n"))
	}
}

// TestCLIFixtureInSync keeps the copy of the L40S box that the CLI
// transcripts (golden/cli/node.ct) run on equal to node/testdata's.
func TestCLIFixtureInSync(t *testing.T) {
	t.Parallel()
	src, dst := "testdata/l40sx2", filepath.Join("..", "golden", "cli", "fixtures", "node-l40s")
	if updateGolden() {
		if err := os.RemoveAll(dst); err != nil {
			t.Fatal(err)
		}
		if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
			t.Fatal(err)
		}
	}
	a, b := snapshotRel(t, src), snapshotRel(t, dst)
	if len(a) != len(b) {
		t.Errorf("%s has %d files, %s %d (UPDATE_GOLDEN=1 go test ./node copies it)", src, len(a), dst, len(b))
	}
	for p, data := range a {
		if b[p] != data {
			t.Errorf("%s differs in %s (UPDATE_GOLDEN=1 go test ./node copies it)", p, dst)
		}
	}
}

func snapshotRel(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for p, s := range snapshot(t, root) {
		rel, _ := filepath.Rel(root, p)
		out[rel] = s.data
	}
	return out
}

// TestRenderedConfigLoadsInRealAgent starts the real buildkite-agent with a
// rendered config against an endpoint that refuses connections: the config
// must load, and plugins (the gpu-docker plugin) must stay enabled despite
// no-local-hooks.
func TestRenderedConfigLoadsInRealAgent(t *testing.T) {
	t.Parallel()
	agent, err := exec.LookPath("buildkite-agent")
	if err != nil {
		t.Skip("buildkite-agent not on PATH: rendered config not loaded by the real agent (" + bkagent.InstallHint + ")")
	}
	dir := t.TempDir()
	var cfg []byte
	for _, f := range renderFixture(t, "h100x8", "nvidia-h100", true) {
		if f.Path == "/etc/buildkite-agent/kbgen/gpu3/buildkite-agent.cfg" {
			cfg = f.Data
		}
	}
	path := filepath.Join(dir, "agent.cfg")
	if err := os.WriteFile(path, cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, agent, "start", "--config", path)
	cmd.Env = []string{"HOME=" + dir, "PATH=/usr/bin:/bin", "BUILDKITE_AGENT_TOKEN=not-a-token", "BUILDKITE_AGENT_ENDPOINT=http://127.0.0.1:1/v3", "BUILDKITE_AGENT_NO_COLOR=true"}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	buf := make([]byte, 4096)
	for !strings.Contains(log.String(), "Registering agent") {
		n, err := stdout.Read(buf)
		log.Write(buf[:n])
		if err != nil {
			break
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	out := log.String()
	if !strings.Contains(out, "Configuration loaded") || !strings.Contains(out, "Registering agent") {
		t.Fatalf("agent did not load the config:\n%s", out)
	}
	if strings.Contains(out, "Plugins have been disabled") {
		t.Errorf("the rendered config disables plugins, so the gpu-docker plugin could not run:\n%s", out)
	}
}

func TestStaleAgents(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if stale, err := StaleAgents(root, &Plan{}); err != nil || stale != nil {
		t.Fatalf("fresh root: %v %v", stale, err)
	}
	if _, err := Apply(root, renderFixture(t, "h100x8", "nvidia-h100", false), false); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, ConfigDir, "gpu-notes"), nil, 0o644)
	p := planFixture(t, "h100x8", defaultOpts)
	p.Agents = slices.DeleteFunc(p.Agents, func(a Agent) bool { return a.GPU.Index == 2 || a.GPU.Index == 7 })
	stale, err := StaleAgents(root, p)
	if err != nil || strings.Join(stale, " ") != "gpu2 gpu7" {
		t.Errorf("stale = %v, %v; want gpu2 gpu7", stale, err)
	}
}

// TestStaleShapeAndMIGAgents: re-planning without --shape or --mig-queue
// (setup-node.sh re-run as documented) marks the shape and MIG agents
// stale, so their units are disabled and their files removed; the control
// agent's directory is never an agent of the plan's.
func TestStaleShapeAndMIGAgents(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	opts := defaultOpts
	opts.Shapes, opts.MIGQueue = []Shape{{"h100x4", 4}}, "nvidia-h100-mig"
	files, err := Render(planFixture(t, "h100x8", opts), InstallOptions{Queue: "nvidia-h100"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(root, files, false); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, ConfigDir, "control"), 0o755); err != nil {
		t.Fatal(err)
	}
	stale, err := StaleAgents(root, planFixture(t, "h100x8", defaultOpts))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(stale, "gpux4-0") || !slices.Contains(stale, "gpu0-mig0") || slices.Contains(stale, "control") || slices.Contains(stale, "gpu1") {
		t.Errorf("stale = %v; want the shape agent gpux4-0 and the MIG agents, not control or gpu1", stale)
	}
	var out bytes.Buffer
	(&InstallReport{Plan: &Plan{}, Done: true, Stale: []string{"gpux8-0"}}).Write(&out, io.Discard)
	if want := "stale        /etc/buildkite-agent/kbgen/gpux8-0: agent gpux8-0 is not in the plan; systemctl disable --now buildkite-agent-gpu@x8-0.service, then remove the directory\n"; !strings.HasPrefix(out.String(), want) {
		t.Errorf("report:\n%s\nwant it to start with\n%s", out.String(), want)
	}
}

// TestRenderAgentTag: with a host name every agent carries the
// kbgen-agent tag naming it as the agent names itself (%hostname-ID), so
// serve can target it, and its identity (kbgen-node, kbgen-gpus: the
// GPU UUIDs its placement passes), so serve's roster knows it from the
// agent list before its first job; a host name a tag cannot carry is
// refused.
func TestRenderAgentTag(t *testing.T) {
	t.Parallel()
	p := planFixture(t, "h100x8", defaultOpts)
	files, err := Render(p, InstallOptions{Queue: "nvidia-h100", Hostname: "gpu-node-7"})
	if err != nil {
		t.Fatal(err)
	}
	var cfg string
	for _, f := range files {
		if f.Path == "/etc/buildkite-agent/kbgen/gpu3/buildkite-agent.cfg" {
			cfg = string(f.Data)
		}
	}
	if want := `tags="queue=nvidia-h100,gpu-index=3,kbgen-agent=gpu-node-7-gpu3,kbgen-node=gpu-node-7,kbgen-gpus=GPU-5a1c3333-4c1e-2f6a-9d0b-e3f1a2b40003"`; !strings.Contains(cfg, want) {
		t.Errorf("gpu3 config lacks %q:\n%s", want, cfg)
	}
	if _, err := Render(p, InstallOptions{Queue: "nvidia-h100", Hostname: "bad,queue=x"}); !isOption(err, "Hostname") {
		t.Errorf("a host name with a comma: error %v, want one naming the host name", err)
	}
}

// isOption reports whether err is an *OptionError for option.
func isOption(err error, option string) bool {
	oe, ok := errors.AsType[*OptionError](err)
	return ok && oe.Option == option
}
