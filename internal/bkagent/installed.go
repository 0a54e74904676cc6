package bkagent

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// ErrNotInstalled: no buildkite-agent binary where Installed looks.
var ErrNotInstalled = errors.New("no buildkite-agent binary")

// Installed finds the real buildkite-agent binary to start (`kbgen doctor
// --e2e`, the real-agent tests), as an absolute path: getenv's
// contract.EnvAgentBinary, then Binary on PATH, then /tmp/bkbin/agent,
// where InstallHint puts it (the module's binary is named agent).
func Installed(getenv func(string) string) (string, error) {
	for _, p := range []string{getenv(contract.EnvAgentBinary), Binary, "/tmp/bkbin/agent"} {
		if p == "" {
			continue
		}
		if path, err := exec.LookPath(p); err == nil {
			return filepath.Abs(path)
		}
	}
	return "", fmt.Errorf("%w (install: %s, or set %s)", ErrNotInstalled, InstallHint, contract.EnvAgentBinary)
}
