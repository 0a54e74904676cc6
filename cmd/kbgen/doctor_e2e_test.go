package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/companion"
)

// TestDoctorE2ECompanion: kbgen doctor --e2e runs kbgen-e2e with its own
// flags, passes its output and exit status through, and without it says
// how to build it (exit 1). The real kbgen-e2e runs in internal/e2e's
// TestDoctorE2E.
func TestDoctorE2ECompanion(t *testing.T) {
	t.Parallel()
	withFake := t.TempDir()
	script := "#!/bin/sh\necho \"args: $*\"\necho to-stderr >&2\nexit 4\n"
	if err := os.WriteFile(filepath.Join(withFake, companion.E2E), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name       string
		path       string
		args       []string
		wantCode   int
		wantStdout string
		wantStderr string
	}{
		{"absent", t.TempDir(), nil, 1, "", "doctor --e2e needs kbgen-e2e beside kbgen or on PATH"},
		{"absent says how to build", t.TempDir(), nil, 1, "", "go build -o"},
		{"runs it", withFake, nil, 4, "args: doctor --kbgen ", "to-stderr"},
		{"passes the flags", withFake, []string{"--gpu", "3", "--root", "/r", "--image", "img:1", "--timeout", "2m"}, 4,
			"--root /r --gpu 3 --timeout 2m0s --image img:1", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			res := runKbgen(t, map[string]string{"PATH": tt.path}, "", append([]string{"doctor", "--e2e"}, tt.args...)...)
			if res.code != tt.wantCode {
				t.Errorf("exit %d, want %d\n%s%s", res.code, tt.wantCode, res.stdout, res.stderr)
			}
			if !strings.Contains(res.stdout, tt.wantStdout) || !strings.Contains(res.stderr, tt.wantStderr) {
				t.Errorf("stdout %q lacks %q or stderr %q lacks %q", res.stdout, tt.wantStdout, res.stderr, tt.wantStderr)
			}
		})
	}
}

// TestNoTestBuildkiteLinked: the shipped binary does not link the local
// Buildkite or the end-to-end harness (kbgen-e2e does), whose package init
// and size every kbgen start-up paid for; and the layers stay apart: the
// node tooling and the sandbox do not link the generator or the runner
// (issue 16: `node` and `qualify` linked `pipelinegen` through a sample
// step, `sandbox` the runner through the result file), nor serve the
// generator and its embedded examples.
func TestNoTestBuildkiteLinked(t *testing.T) {
	t.Parallel()
	const mod = "github.com/gpu-mode/kbgen/"
	generator := []string{mod + "pipelinegen", mod + "runner", mod + "examples", mod + "jobsource"}
	for _, tt := range []struct {
		pkg       string
		forbidden []string
	}{
		// go-nvml is cgo: linked, kbgen would no longer be static (the
		// sandbox mounts it into images of any libc). NVML is kbgen-nvml's.
		{".", []string{mod + "internal/fakebuildkite", mod + "internal/e2e", "net/http/httptest", mod + "nvmlhelper/nvmlserve", "github.com/NVIDIA/go-nvml/pkg/nvml"}},
		{mod + "node", generator},
		{mod + "qualify", generator},
		{mod + "sandbox", generator},
		// The registry reads the noise policy (internal/noisepolicy), not
		// the noise record with its samplers and the NVML client.
		{mod + "serve", []string{mod + "pipelinegen", mod + "examples", mod + "noise", mod + "nvmlhelper"}},
	} {
		t.Run(tt.pkg, func(t *testing.T) {
			t.Parallel()
			out, err := exec.Command("go", "list", "-deps", tt.pkg).Output()
			if err != nil {
				t.Fatalf("go list -deps %s: %v", tt.pkg, err)
			}
			deps := strings.Fields(string(out))
			for _, pkg := range tt.forbidden {
				if slices.Contains(deps, pkg) {
					t.Errorf("%s links %s", tt.pkg, pkg)
				}
			}
		})
	}
}
