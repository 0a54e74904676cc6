package bkdoctor

import (
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/registry"
)

// TestVendorQueueFix: a queue without agents is told how its agents
// join: node install on a vendor node, agent-stack-k8s for a Kubernetes
// queue (node install refuses one; the fix once told it to run it).
func TestVendorQueueFix(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		queue, want, never string
	}{
		{"nvidia-h100", "kbgen node install --queue nvidia-h100", "agent-stack-k8s"},
		{"nebius-h100-k8s", "agent-stack-k8s with tags queue=nebius-h100-k8s", "runs kbgen node install"},
	} {
		t.Run(tc.queue, func(t *testing.T) {
			t.Parallel()
			v, err := reg.Lookup(tc.queue)
			if err != nil {
				t.Fatal(err)
			}
			c := vendorQueueCheck(v, nil)
			if c.Level != Warn || !strings.Contains(c.Fix, tc.want) || strings.Contains(c.Fix, tc.never) {
				t.Errorf("%s: %s %q; want a warning whose fix says %q, never %q", tc.queue, c.Level, c.Fix, tc.want, tc.never)
			}
		})
	}
}
