package node

import (
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"testing/fstest"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/golden"
)

const controlFixture = "testdata/control"

// controlOpts are a control agent's options with the fixture key, and
// the fixture registry and a token when full.
func controlOpts(t *testing.T, full bool) ControlOptions {
	t.Helper()
	key, err := os.ReadFile(filepath.Join(controlFixture, "signing-test-only.jwks"))
	if err != nil {
		t.Fatal(err)
	}
	opts := ControlOptions{SigningJWKS: key}
	if full {
		opts.Token = fakeToken
		if opts.Vendors, err = os.ReadFile(filepath.Join(controlFixture, "vendors.yaml")); err != nil {
			t.Fatal(err)
		}
	}
	return opts
}

func renderControl(t *testing.T, opts ControlOptions) map[string]File {
	t.Helper()
	files, err := RenderControl(opts)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]File{}
	for _, f := range files {
		out[f.Path] = f
	}
	return out
}

// TestRenderControlGolden compares every file of a control install (with
// a token and a registry) with golden/node/control/ (UPDATE_GOLDEN=1
// rewrites them).
func TestRenderControlGolden(t *testing.T) {
	t.Parallel()
	files := renderControl(t, controlOpts(t, true))
	dir := filepath.Join("..", "golden", "node", "control")
	var list []File
	for _, f := range files {
		list = append(list, f)
	}
	if golden.Update() {
		if err := os.RemoveAll(dir); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range list {
		golden.Check(t, filepath.Join(dir, f.Path), f.Data)
	}
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			n++
		}
		return nil
	})
	if n != len(list) {
		t.Errorf("golden/node/control holds %d files, %d are rendered: remove the stale ones (UPDATE_GOLDEN=1)", n, len(list))
	}
}

// TestRenderControlContents: what makes a control agent one, line by line.
func TestRenderControlContents(t *testing.T) {
	t.Parallel()
	full, bare := renderControl(t, controlOpts(t, true)), renderControl(t, controlOpts(t, false))
	has := func(files map[string]File, path, want string) bool {
		return bytes.Contains(files[path].Data, []byte(want))
	}
	cfg, env := ControlDir+"/buildkite-agent.cfg", ControlDir+"/hooks/environment"
	tests := []struct {
		name string
		ok   bool
	}{
		{"tagged with the settings steps' queue", has(full, cfg, `tags="queue=`+contract.ControlQueue+`"`)},
		{"no plugins", has(full, cfg, "no-plugins=true\n")},
		{"no local hooks", has(full, cfg, "no-local-hooks=true\n")},
		{"spawn default", has(full, cfg, "spawn=4\n")},
		{"the hook exports the installed key", has(full, env, "export KBGEN_SIGNING_KEY="+SigningKeyFile+"\n")},
		{"the hook exports the installed registry", has(full, env, "export KBGEN_VENDORS="+ControlVendorsFile+"\n")},
		{"without a registry the hook drops a build's", has(bare, env, "unset KBGEN_VENDORS\n")},
		{"without a registry none is installed", bare[ControlVendorsFile].Path == ""},
		{"without a token no token file", bare[TokenFile].Path == ""},
		{"the key 0600, owned by the agent user", full[SigningKeyFile].Mode == 0o600 && full[SigningKeyFile].Owner == DefaultUser},
		{"the token 0600, root's", full[TokenFile].Mode == 0o600 && full[TokenFile].Owner == ""},
		{"hooks executable", full[env].Mode == 0o755 && full[ControlDir+"/hooks/checkout"].Mode == 0o755},
		{"the unit starts the control config", has(full, SystemdDir+"/"+ControlUnit, "start --config "+cfg+"\n")},
		{"no GPU placement anywhere", !anyHas(full, "KERNELBOT_GPU") && !anyHas(full, "docker")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if !tt.ok {
				t.Errorf("not so; config:\n%s\nhook:\n%s", full[cfg].Data, full[env].Data)
			}
		})
	}
	// The secrets live in one file each.
	for path, f := range full {
		if path != TokenFile && bytes.Contains(f.Data, []byte(fakeToken)) {
			t.Errorf("token leaked into %s", path)
		}
		if path != SigningKeyFile && bytes.Contains(f.Data, []byte(`"d"`)) {
			t.Errorf("private key material in %s", path)
		}
	}
}

func anyHas(files map[string]File, s string) bool {
	for _, f := range files {
		if bytes.Contains(f.Data, []byte(s)) {
			return true
		}
	}
	return false
}

func TestRenderControlRejects(t *testing.T) {
	t.Parallel()
	pub, err := os.ReadFile("testdata/verification.jwks")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		modify func(*ControlOptions)
		option string // the OptionError's Option
		// want is text only where the message is the contract: it tells
		// the operator which key file to use.
		want string
	}{
		{"a public key", func(o *ControlOptions) { o.SigningJWKS = pub }, "SigningJWKS", "is a public key; the control agents hold the file from `kbgen keygen --private-out`"},
		{"no key", func(o *ControlOptions) { o.SigningJWKS = nil }, "SigningJWKS", ""},
		{"a broken registry", func(o *ControlOptions) { o.Vendors = []byte("vendors: [{queue: x, colour: red}]") }, "Vendors", ""},
		{"too many agents", func(o *ControlOptions) { o.Spawn = 65 }, "Spawn", ""},
		{"a negative spawn", func(o *ControlOptions) { o.Spawn = -1 }, "Spawn", ""},
		{"a user with a space", func(o *ControlOptions) { o.User = "build kite" }, "User", ""},
		{"a relative agent", func(o *ControlOptions) { o.AgentBinary = "buildkite-agent" }, "AgentBinary", ""},
		{"a token with a newline", func(o *ControlOptions) { o.Token = "x\ny" }, "Token", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := controlOpts(t, false)
			tt.modify(&opts)
			_, err := RenderControl(opts)
			if !isOption(err, tt.option) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want an OptionError for %s saying %q", err, tt.option, tt.want)
			}
		})
	}
}

// TestControlInputs: where the key, registry and token come from, and the
// key files install refuses.
func TestControlInputs(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fixture, err := os.ReadFile(filepath.Join(controlFixture, "signing-test-only.jwks"))
	if err != nil {
		t.Fatal(err)
	}
	key := filepath.Join(dir, "key.jwks")
	must(t, os.WriteFile(key, fixture, 0o600))
	open := filepath.Join(dir, "open.jwks")
	must(t, os.WriteFile(open, fixture, 0o600))
	must(t, os.Chmod(open, 0o640))
	pub := filepath.Join(dir, "pub.jwks")
	pubData, _ := os.ReadFile("testdata/verification.jwks")
	must(t, os.WriteFile(pub, pubData, 0o600))
	installed := t.TempDir()
	must(t, os.MkdirAll(filepath.Join(installed, ControlDir), 0o755))
	must(t, os.WriteFile(filepath.Join(installed, SigningKeyFile), fixture, 0o600))
	must(t, os.WriteFile(filepath.Join(installed, ControlVendorsFile), []byte("kept"), 0o644))

	// want is text only where the message is the contract: it tells the
	// operator what to do (chmod 600, which key file, which flag).
	tests := []struct {
		name        string
		in          ControlInputs
		input       string // the InputError's Input; "" = loads
		cause       error  // what it wraps, where there is a kind
		want        string
		wantKey     bool
		wantVendors string
	}{
		{"a 0600 key", ControlInputs{SigningKey: key, Root: t.TempDir()}, "", nil, "", true, ""},
		{"a group-readable key", ControlInputs{SigningKey: open, Root: t.TempDir()}, "SigningKey", nil, "readable by others (mode 0640): chmod 600", false, ""},
		{"a public key", ControlInputs{SigningKey: pub, Root: t.TempDir()}, "SigningKey", nil, "is a public key", false, ""},
		{"a missing key file", ControlInputs{SigningKey: filepath.Join(dir, "none"), Root: t.TempDir()}, "SigningKey", fs.ErrNotExist, "", false, ""},
		{"no key and none installed", ControlInputs{Root: t.TempDir()}, "SigningKey", nil, "no signing key: pass --signing-key", false, ""},
		{"no key: the installed one is kept, and the registry", ControlInputs{Root: installed}, "", nil, "", true, "kept"},
		{"a missing registry", ControlInputs{SigningKey: key, Vendors: filepath.Join(dir, "none.yaml"), Root: t.TempDir()}, "Vendors", fs.ErrNotExist, "", true, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opts ControlOptions
			err := tt.in.Load(&opts)
			if tt.input == "" && err != nil {
				t.Fatalf("err = %v, want none", err)
			}
			// An InputError: the CLI exits 2 for those.
			if tt.input != "" && (!isInput(err, tt.input) || tt.cause != nil && !errors.Is(err, tt.cause) || !strings.Contains(err.Error(), tt.want)) {
				t.Fatalf("err = %v, want an InputError for %s (cause %v) saying %q", err, tt.input, tt.cause, tt.want)
			}
			if got := bytes.Equal(opts.SigningJWKS, fixture); got != tt.wantKey {
				t.Errorf("key loaded: %v, want %v", got, tt.wantKey)
			}
			if string(opts.Vendors) != tt.wantVendors {
				t.Errorf("vendors %q, want %q", opts.Vendors, tt.wantVendors)
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestApplyOwner: a file with an Owner is written to that user on a real
// install, replaced when someone else owns it, and left to the installer
// in a staging tree.
func TestApplyOwner(t *testing.T) {
	t.Parallel()
	if os.Geteuid() != 0 {
		t.Skip("chown needs root")
	}
	nobody := &owner{uid: 65534, gid: 65534}
	target := filepath.Join(t.TempDir(), "key")
	f := File{Path: "/key", Mode: 0o600, Data: []byte("k"), Owner: "nobody"}
	must(t, writeAtomic(target, f, nobody))
	var st syscall.Stat_t
	must(t, syscall.Stat(target, &st))
	if st.Uid != 65534 || st.Gid != 65534 || st.Mode&0o777 != 0o600 {
		t.Errorf("written %d:%d %o, want 65534:65534 600", st.Uid, st.Gid, st.Mode&0o777)
	}
	tests := []struct {
		name string
		own  *owner
		want Change
	}{
		{"its owner", nobody, Unchanged},
		{"another owner", &owner{uid: 0, gid: 0}, Updated},
		{"no owner asked", nil, Unchanged},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got, err := compare(target, f, tt.own); err != nil || got != tt.want {
				t.Errorf("compare = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
	if own, err := lookupOwner(t.TempDir(), f); own != nil || err != nil {
		t.Errorf("a staging root resolves an owner: %v, %v", own, err)
	}
	if _, err := lookupOwner("/", File{Path: "/key", Owner: "kbgen-no-such-user"}); !errors.As(err, new(user.UnknownUserError)) {
		t.Errorf("an unknown user on a real install: %v", err)
	}
}

// TestControlUnitVerifies runs systemd-analyze verify on the control unit.
func TestControlUnitVerifies(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed: the control unit is not verified (apt-get install systemd)")
	}
	agent, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no `true` binary")
	}
	opts := controlOpts(t, false)
	opts.AgentBinary = agent
	files := renderControl(t, opts)
	unit := filepath.Join(t.TempDir(), ControlUnit)
	must(t, os.WriteFile(unit, files[SystemdDir+"/"+ControlUnit].Data, 0o644))
	out, err := exec.Command("systemd-analyze", "verify", "--man=no", unit).CombinedOutput()
	if err != nil && bytes.Contains(out, []byte("Failed to")) && bytes.Contains(out, []byte("bus")) {
		t.Skipf("systemd-analyze cannot run here: %s", out)
	}
	var problems []string
	for _, line := range strings.Split(string(out), "\n") {
		// The user and network-online.target do not exist on a build machine.
		if line != "" && !strings.Contains(line, "network-online") && !strings.Contains(line, "buildkite-agent") {
			problems = append(problems, line)
		}
	}
	if err != nil && len(problems) > 0 || len(problems) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(problems, "\n"))
	}
}

// controlRoot is a machine root with a control agent installed as
// `kbgen node install --control --user nobody` would (the key owned by
// nobody, a token, no registry).
func controlRoot(t *testing.T) fstest.MapFS {
	t.Helper()
	nobody, err := user.Lookup("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	opts := controlOpts(t, false)
	opts.User, opts.Token = "nobody", fakeToken
	root := fstest.MapFS{}
	for _, f := range renderControl(t, opts) {
		mf := &fstest.MapFile{Data: f.Data, Mode: f.Mode}
		if f.Owner != "" {
			mf.Sys = &syscall.Stat_t{Uid: uint32(uid)}
		}
		root[rel(f.Path)] = mf
	}
	return root
}

// TestDoctorControl: on a control host doctor checks the control agent,
// and names what is wrong with it.
func TestDoctorControl(t *testing.T) {
	t.Parallel()
	pub, err := os.ReadFile("testdata/verification.jwks")
	if err != nil {
		t.Fatal(err)
	}
	key := rel(SigningKeyFile)
	tests := []struct {
		name     string
		modify   func(fstest.MapFS)
		inactive bool
		failing  string // the one failing check; "" = all pass
		detail   string
	}{
		{"as installed", func(fstest.MapFS) {}, false, "", ""},
		{"a readable key", func(r fstest.MapFS) { r[key].Mode = 0o644 }, false, "signing key", "mode 0644, want 0600"},
		{"a key root owns", func(r fstest.MapFS) { r[key].Sys = &syscall.Stat_t{Uid: 0} }, false, "signing key", "owned by uid 0, not by nobody"},
		{"a public key", func(r fstest.MapFS) { r[key].Data = pub }, false, "signing key", "is a public key"},
		{"no key", func(r fstest.MapFS) { delete(r, key) }, false, "signing key", "--signing-key FILE"},
		{"a broken registry", func(r fstest.MapFS) { r[rel(ControlVendorsFile)] = &fstest.MapFile{Data: []byte("vendors: 3")} }, false, "vendor registry", ControlVendorsFile},
		{"no token", func(r fstest.MapFS) { delete(r, rel(TokenFile)) }, false, "agent token", "--token-file"},
		{"another queue", func(r fstest.MapFS) {
			f := r[rel(ControlDir+"/buildkite-agent.cfg")]
			f.Data = bytes.ReplaceAll(f.Data, []byte(contract.ControlQueue), []byte("nvidia-h100"))
		}, false, "control agent installed", "lacks tags=\"queue=kernelbot-control\""},
		{"GPU agents beside it", func(r fstest.MapFS) { r[rel(PlanFile)] = &fstest.MapFile{Data: []byte("{}")} }, false, "no GPU agents", "next to the signing key"},
		{"the unit stopped", func(fstest.MapFS) {}, true, ControlUnit, "inactive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := controlRoot(t)
			tt.modify(root)
			state := "active"
			if tt.inactive {
				state = "inactive"
			}
			runner := &fakeNode{outputs: map[string]string{
				DefaultAgentBinary + " --version":    "buildkite-agent version 3.52.1, build x\n",
				"systemctl is-active " + ControlUnit: state + "\n",
			}}
			checks := (&Doctor{Root: root, Runner: runner}).Run(context.Background())
			if len(checks) < 6 {
				t.Fatalf("%d checks: %+v", len(checks), checks)
			}
			for _, c := range checks {
				wantFail := c.Name == tt.failing
				if c.OK == wantFail {
					t.Errorf("%s: ok %v (%s), want ok %v", c.Name, c.OK, c.Detail, !wantFail)
				}
				if wantFail && !strings.Contains(c.Detail, tt.detail) {
					t.Errorf("%s: %q lacks %q", c.Name, c.Detail, tt.detail)
				}
				if strings.Contains(c.Name, "isolation") || strings.Contains(c.Name, "GPU driver") {
					t.Errorf("a GPU check on a control host: %+v", c)
				}
			}
		})
	}
}
