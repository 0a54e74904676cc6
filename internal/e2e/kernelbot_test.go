package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The environment of TestKernelbotBackend, set by scripts/kernelbot-check.sh.
const (
	// EnvKernelbotDir is a Kernelbot checkout with kernelbot.patch applied.
	EnvKernelbotDir = "KBGEN_KERNELBOT_DIR"
	// EnvKernelbotPython is a Python ≥ 3.12 that imports Kernelbot's
	// dependencies (default python3).
	EnvKernelbotPython = "KBGEN_KERNELBOT_PYTHON"
	// EnvKernelbotPythonPath is prepended to PYTHONPATH after the
	// checkout's src/ (stand-ins for packages PyPI could not provide).
	EnvKernelbotPythonPath = "KBGEN_KERNELBOT_PYTHONPATH"
)

// kernelbotGPU is the BuildkiteGPU whose queue (vendorQueue, nvidia-l40s)
// the harness's agents serve.
const kernelbotGPU = "L40S_BK"

// TestKernelbotBackend: Kernelbot's own KernelBackend.handle_submission,
// compute_score, reports and get_runner_queue_status, through the patched
// BuildkiteLauncher, a real kbgen serve and real builds on real agents
// (scripts/kernelbot-check/backend_e2e.py). Needs a patched Kernelbot
// checkout: scripts/kernelbot-check.sh runs it.
func TestKernelbotBackend(t *testing.T) {
	dir := os.Getenv(EnvKernelbotDir)
	if dir == "" {
		t.Skipf("%s is not set: no patched Kernelbot checkout (scripts/kernelbot-check.sh KERNELBOT_DIR runs this test)", EnvKernelbotDir)
	}
	py := os.Getenv(EnvKernelbotPython)
	if py == "" {
		py = "python3"
	}
	// Leaderboard mode asks for its three timeouts plus the start-up
	// minutes (15 for examples/identity): more than the harness's default.
	h := newHarness(t, harnessOpts{vendorTimeoutMinutes: 20})
	sock, log := h.startServe(t, "500ms")
	pythonPath := filepath.Join(dir, "src")
	if extra := os.Getenv(EnvKernelbotPythonPath); extra != "" {
		pythonPath += ":" + extra
	}
	cmd := exec.Command(py, filepath.Join(srcRoot(t), "scripts", "kernelbot-check", "backend_e2e.py"))
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pythonPath, "PYTHONDONTWRITEBYTECODE=1",
		"KBGEN_SERVER=unix:"+sock, "KBGEN_TASK="+filepath.Join(srcRoot(t), "examples", "identity"), "KBGEN_GPU="+kernelbotGPU)
	out, err := cmd.CombinedOutput()
	t.Logf("backend_e2e.py (Kernelbot at %s):\n%s", dir, out)
	if err != nil {
		t.Fatalf("Kernelbot's backend through kbgen failed: %v\nkbgen serve:\n%s", err, log.String())
	}
	if !strings.Contains(string(out), "4 passed, 0 failed") {
		t.Fatal("not every step ran")
	}
	if n := h.srv.CountRequests("PUT", "/cancel"); n != 1 {
		t.Errorf("%d build cancels; want 1 (the cancelled task's)", n)
	}
}
