package bkagent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

func TestInstalled(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "agent")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir) // no buildkite-agent on PATH
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == contract.EnvAgentBinary {
				return v
			}
			return ""
		}
	}
	if got, err := Installed(env(fake)); err != nil || got != fake {
		t.Errorf("with %s set: %q, %v; want %q", contract.EnvAgentBinary, got, err, fake)
	}
	if _, err := os.Stat("/tmp/bkbin/agent"); err == nil {
		t.Skip("/tmp/bkbin/agent exists on this machine: the not-found case cannot be shown")
	}
	_, err := Installed(env(""))
	// The hint is what a developer reads to get the binary.
	if !errors.Is(err, ErrNotInstalled) || !strings.Contains(err.Error(), InstallHint) {
		t.Errorf("nothing installed: %v, want the install hint", err)
	}
}
