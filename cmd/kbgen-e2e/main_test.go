package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// TestRun: kbgen-e2e's exit codes and one-line errors, short of starting
// an agent (internal/e2e's TestDoctorE2E runs the whole of it).
func TestRun(t *testing.T) {
	t.Parallel()
	noAgent := func(string) string { return "" }
	tests := []struct {
		name       string
		args       []string
		getenv     func(string) string
		wantCode   int
		wantOutput string
	}{
		{"help", []string{"--help"}, noAgent, 0, "kbgen-e2e <command>"},
		{"doctor help", []string{"doctor", "--help"}, noAgent, 0, "sudo kbgen doctor --e2e --gpu 0"},
		{"no command", nil, noAgent, 2, "expected"},
		{"bad flag", []string{"doctor", "--bogus"}, noAgent, 2, "unknown flag --bogus"},
		{"buildkite help", []string{"buildkite", "--help"}, noAgent, 0, "kbgen-e2e buildkite --agents rehearsal/stage-control"},
		{"buildkite, no agent binary", []string{"buildkite", "--kbgen", "/bin/true", "--agents", "stage"}, noAgent, 1, "kbgen-e2e: buildkite: "},
		{"buildkite, a root without agents", []string{"buildkite", "--kbgen", "/bin/true", "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0", "--agents", t.TempDir()},
			func(k string) string { return map[string]string{contract.EnvAgentBinary: "/bin/true"}[k] }, 1, "holds neither a control agent nor GPU agents"},
		{"buildkite, a taken address", []string{"buildkite", "--kbgen", "/bin/true", "--listen", "256.0.0.1:1"}, noAgent, 1, "REST API"},
		{"no node installed", []string{"doctor", "--kbgen", "/bin/true", "--root", t.TempDir()},
			func(k string) string { return map[string]string{contract.EnvAgentBinary: "/bin/true"}[k] }, 1, "kbgen-e2e: doctor --e2e: "},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			code := run(tt.args, &stdio{Stdout: &out, Stderr: &errb, Getenv: tt.getenv})
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d\n%s%s", code, tt.wantCode, out.String(), errb.String())
			}
			if all := out.String() + errb.String(); !strings.Contains(all, tt.wantOutput) {
				t.Errorf("output lacks %q:\n%s", tt.wantOutput, all)
			}
		})
	}
}
