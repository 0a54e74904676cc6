package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
