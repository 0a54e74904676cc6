package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/sandbox/gpuhealth/gpuhealthtest"
)

// TestNodeInstallVendorFirstDay covers two vendor bugs of issue 19 on the
// fixture node: an advertised alias tagged the agents queue=<alias> while
// steps target the canonical queue (no job ever arrived), and an install
// without --plugin silently skipped the plugin pin.
func TestNodeInstallVendorFirstDay(t *testing.T) {
	fx := "../../golden/cli/fixtures/node-l40s"
	for _, tc := range []struct {
		name, queue string
	}{
		{name: "canonical queue", queue: "nvidia-l40s"},
		{name: "alias", queue: "test"}, // the registry's alias of nvidia-l40s
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			r := runKbgen(t, nil, "", "node", "install", "--sysfs", fx+"/sys", "--nvidia-smi", fx+"/nvidia-smi.csv", "--queue", tc.queue, "--root", root)
			if r.code != 0 {
				t.Fatalf("install: exit %d: %s", r.code, r.stderr)
			}
			cfg, err := os.ReadFile(filepath.Join(root, "etc/buildkite-agent/kbgen/gpu0/buildkite-agent.cfg"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(cfg), "queue=nvidia-l40s,") {
				t.Errorf("agent not tagged with the canonical queue:\n%s", cfg)
			}
			if !strings.Contains(r.stdout, "2 agents for queue nvidia-l40s;") {
				t.Errorf("install does not name the canonical queue:\n%s", r.stdout)
			}
			if alias := tc.queue != "nvidia-l40s"; alias != strings.Contains(r.stdout, `note: queue "test" is an alias of "nvidia-l40s"`) {
				t.Errorf("alias note shown %v, want %v:\n%s", !alias, alias, r.stdout)
			}
			for _, f := range []string{"usr/local/share/kbgen/plugins/gpu-docker/hooks/command", "etc/buildkite-agent/kbgen/gpu1/hooks/post-checkout"} {
				if _, err := os.Stat(filepath.Join(root, f)); err != nil {
					t.Errorf("plugin not pinned without --plugin: %v", err)
				}
			}
		})
	}
}

// TestNodeCheckGPU: an agent out of rotation (3 machine faults in a row)
// whose GPU is still dirty exits 75 and says it stays out; once clean it
// exits 0, back in rotation, and its count is gone.
func TestNodeCheckGPU(t *testing.T) {
	const uuid = "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	smi, err := filepath.Abs(filepath.Join(gpuhealthtest.Testdata(), "stand-in-nvidia-smi"))
	if err != nil {
		t.Fatal(err)
	}
	bin, leases := t.TempDir(), t.TempDir()
	if err := os.Symlink(smi, filepath.Join(bin, "nvidia-smi")); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(bin, "apps.csv"), nil, 0o644)
	faults := filepath.Join(leases, "faults-"+uuid+"-x1")
	os.WriteFile(faults, []byte("3\n"), 0o644)
	env := map[string]string{"PATH": bin, "KBGEN_LEASE_DIR": leases, "KERNELBOT_GPU_UUID": uuid}
	for _, tc := range []struct {
		used, want string
		code       int
	}{{"30000", "stays out of rotation", 75}, {"1", "clean; 3 machine fault(s) in a row cleared: in rotation", 0}} {
		os.WriteFile(filepath.Join(bin, "state.csv"), []byte(uuid+", 00000000:3B:00.0, "+tc.used+", 0\n"), 0o644)
		r := runKbgen(t, env, "", "node", "check-gpu", "--if-out")
		if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
			t.Errorf("%s MiB in use: exit %d, %q %q; want %d saying %q", tc.used, r.code, r.stdout, r.stderr, tc.code, tc.want)
		}
	}
	if _, err := os.Stat(faults); err == nil {
		t.Error("the fault count was not cleared")
	}
}
