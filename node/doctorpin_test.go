package node

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// TestDoctorPluginPin: a node installed without the pin, with a pin older
// than this kbgen, or with an agent lacking the post-checkout hook fails
// plain doctor (before, only doctor --e2e noticed).
func TestDoctorPluginPin(t *testing.T) {
	t.Parallel()
	plan := planFixture(t, "h100x8", defaultOpts)
	for _, tc := range []struct {
		name    string
		breakIt func(fstest.MapFS)
		want    string // "" passes
	}{
		{name: "pinned by default", breakIt: func(fstest.MapFS) {}},
		{name: "installed without the pin", breakIt: func(root fstest.MapFS) {
			for p := range root {
				if strings.HasPrefix(p, "usr/local/share/kbgen/") || strings.HasSuffix(p, "/post-checkout") {
					delete(root, p)
				}
			}
		}, want: "/usr/local/share/kbgen/plugins/gpu-docker/hooks/command missing"},
		{name: "stale pin after an upgrade", breakIt: func(root fstest.MapFS) {
			root["usr/local/share/kbgen/plugins/gpu-docker/hooks/command"] = &fstest.MapFile{Data: []byte("#!/bin/bash\nold\n"), Mode: 0o755}
		}, want: "hooks/command differs from this kbgen's plugin"},
		{name: "an agent without the hook", breakIt: func(root fstest.MapFS) {
			delete(root, "etc/buildkite-agent/kbgen/gpu5/hooks/post-checkout")
		}, want: "/etc/buildkite-agent/kbgen/gpu5/hooks/post-checkout missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			root := installedRoot(t, "h100x8", "nvidia-h100")
			tc.breakIt(root)
			c := (&Doctor{Root: root}).checkPluginPin(plan)
			if tc.want == "" {
				if !c.OK {
					t.Fatalf("failed: %s", c.Detail)
				}
				return
			}
			if c.OK || !strings.Contains(c.Detail, tc.want) {
				t.Fatalf("ok=%v %q, want a failure naming %q", c.OK, c.Detail, tc.want)
			}
		})
	}
}

// TestDoctorStaticKbgen: a dynamically linked kbgen (every step would exit
// 75) fails plain doctor; the static build passes.
func TestDoctorStaticKbgen(t *testing.T) {
	t.Parallel()
	dynamic, err := exec.LookPath("ls")
	if err != nil {
		t.Skip("no ls on PATH to stand for a dynamically linked binary")
	}
	for _, tc := range []struct {
		name, bin, want string
		ok              bool
	}{
		{name: "static release build", bin: kbgenbin.Path(t), ok: true, want: "is statically linked"},
		{name: "dynamically linked", bin: dynamic, want: "dynamically linked; build kbgen with CGO_ENABLED=0: every step would exit 75"},
		{name: "not an executable", bin: filepath.Join("testdata", "h100x8", "nvidia-smi.csv"), want: "is not a Linux executable"},
		{name: "not given", want: "skipped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := (&Doctor{Kbgen: tc.bin}).checkStatic()
			if c.OK != tc.ok || !strings.Contains(c.Detail, tc.want) {
				t.Fatalf("ok=%v %q, want ok=%v with %q", c.OK, c.Detail, tc.ok, tc.want)
			}
		})
	}
}
