package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/bkdoctor"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

// TestDoctorBuildkite: kbgen doctor --buildkite prints one line per check
// (the fix indented under it) and exits 0 when nothing failed, 1 when a
// check failed, 4 when Buildkite did not answer, 2 without a token; the
// token never shows.
func TestDoctorBuildkite(t *testing.T) {
	t.Parallel()
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	down := fakebuildkite.New(nil)
	down.Close()
	env := func(f *fakebuildkite.Server) map[string]string {
		return map[string]string{"BUILDKITE_API_URL": f.URL(), "BUILDKITE_API_TOKEN": f.Token, "BUILDKITE_ORG": f.Org, "BUILDKITE_PIPELINE": f.Pipeline}
	}
	documented := func() {
		p := fakebuildkite.NewPipelineSettings()
		p.Configuration, p.TriggerMode, p.BuildPullRequests = bkdoctor.SettingsSteps(contract.ControlQueue), "none", false
		fake.SetPipelineSettings(p)
		fake.SetAgents([]fakebuildkite.AgentSpec{{Name: "control-1", Version: "3.52.1", Queue: contract.ControlQueue}})
	}
	tokens := filepath.Join(t.TempDir(), "tokens")
	if err := os.WriteFile(tokens, []byte(fake.Token+"\nbkua_same-user\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		setup func()
		env   map[string]string
		code  int
		want  []string // in stdout, or stderr for codes 2 and 4
		args  []string // more flags
	}{
		{"a new pipeline", func() {}, env(fake), 1, []string{
			"PASS  API token: ", "FAIL  settings steps: no step runs kbgen generate --upload",
			"      fix: Pipeline Settings → Steps: replace them", "FAIL  build triggers: ", "FAIL  queue kernelbot-control: ",
			"WARN  queue nvidia-h100: no agents connected"}, nil},
		{"the documented setup, vendor queues still empty", documented, env(fake), 0, []string{
			"PASS  settings steps: ", "PASS  queue kernelbot-control: control queue: 1 connected", "WARN  queue amd-mi300: "}, nil},
		{"Buildkite unreachable", func() {}, env(down), 4, []string{"kbgen: asking Buildkite: "}, nil},
		{"no token", func() {}, map[string]string{"BUILDKITE_ORG": "gpu-mode", "BUILDKITE_PIPELINE": "kernelbot"}, 2, []string{"no Buildkite API token"}, nil},
		{"two tokens of one user in --token-file", func() { fake.AddToken("bkua_same-user", fakebuildkite.DefaultUser) }, env(fake), 1,
			[]string{"PASS  API token 2: ", "FAIL  token users: two tokens belong to kbgen@example.com"}, []string{"--token-file", tokens}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			res := runKbgen(t, tc.env, "", append([]string{"doctor", "--buildkite", "--timeout", "20s"}, tc.args...)...)
			out := res.stdout
			if tc.code >= 2 {
				out = res.stderr
			}
			if res.code != tc.code {
				t.Fatalf("exit %d, want %d\n%s%s", res.code, tc.code, res.stdout, res.stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Contains(res.stdout+res.stderr, fake.Token) || strings.Contains(res.stdout+res.stderr, "bkua_same-user") {
				t.Errorf("the token shows in the output")
			}
		})
	}
}
