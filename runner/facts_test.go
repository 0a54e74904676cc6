package runner

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// TestPowerLimitsAsked: on an NVIDIA agent the facts ask nvidia-smi for
// the power limits with nvsmi.PowerLimitArgs (the fake answers only to
// that query); an AMD agent, or an nvidia-smi that fails, gives none.
func TestPowerLimitsAsked(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\n[ \"$*\" = '--query-gpu=uuid,power.limit --format=csv,noheader,nounits' ] || exit 3\necho 'GPU-a, 700.00'\n"
	if err := os.WriteFile(filepath.Join(bin, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin)
	nvidia := contract.MapLookup(map[string]string{contract.EnvGPUUUID: "GPU-a"})
	if got := string(powerLimits(context.Background(), nvidia)); got != "GPU-a, 700.00\n" {
		t.Errorf("NVIDIA agent: %q, want nvidia-smi's answer", got)
	}
	if got := powerLimits(context.Background(), contract.MapLookup(map[string]string{contract.EnvGPURenderNode: "/dev/dri/renderD128"})); got != nil {
		t.Errorf("AMD agent: %q, want nil", got)
	}
	t.Setenv("PATH", t.TempDir())
	if got := powerLimits(context.Background(), nvidia); got != nil {
		t.Errorf("no nvidia-smi: %q, want nil", got)
	}
}
