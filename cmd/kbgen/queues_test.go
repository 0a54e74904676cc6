package main

import (
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// TestQueuesViaServer: kbgen queues --server prints a kbgen serve's cached
// view as the direct command prints Buildkite's; bad input exits 2.
func TestQueuesViaServer(t *testing.T) {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.QuickScript)
	fake.SetAgents([]fakebuildkite.AgentSpec{
		{Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100", BusyWith: "eval"},
		{Name: "h100-gpu1", Version: "3.52.1", Queue: "nvidia-h100"},
	})
	p := startServe(t, kbgenbin.Path(t), fake, map[string]string{"KBGEN_SERVER_TOKEN": "tok"}, "--listen", "127.0.0.1:0")
	tests := []struct {
		name  string
		token string
		args  []string
		code  int
		want  string // in stdout (exit 0) or stderr
	}{
		{"table", "tok", []string{"h100"}, 0, "nvidia-h100  2       1     1     0        3.52.1"},
		{"json", "tok", []string{"h100", "--json"}, 0, `"running": 1`},
		{"unknown queue", "tok", []string{"nosuch"}, 2, "nosuch"},
		{"wrong token", "wrong", []string{"h100"}, 2, "KBGEN_SERVER_TOKEN"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runKbgen(t, map[string]string{"KBGEN_SERVER_TOKEN": tc.token}, "", append([]string{"queues", "--server", p.url}, tc.args...)...)
			out := res.stdout
			if tc.code != 0 {
				out = res.stderr
			}
			if res.code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("kbgen queues %v: exit %d, stdout %q, stderr %q; want exit %d with %q", tc.args, res.code, res.stdout, res.stderr, tc.code, tc.want)
			}
		})
	}
	if n := fake.CountRequests("GET", "/agents"); n != 1 {
		t.Errorf("%d agent list requests for three answers; want 1 (the cached view)", n)
	}
}

// TestQueuesDirect: the help's own example, `kbgen queues h100 --json`,
// reads Buildkite directly with the alias resolved as --server resolves
// it, and a queue the registry does not know is refused (2) unless
// --allow-unknown-queue.
func TestQueuesDirect(t *testing.T) {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetAgents([]fakebuildkite.AgentSpec{
		{Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100", BusyWith: "eval"},
		{Name: "h100-gpu1", Version: "3.52.1", Queue: "nvidia-h100"},
		{Name: "lab-gpu0", Version: "3.52.1", Queue: "lab-queue"},
	})
	env := map[string]string{"BUILDKITE_API_URL": fake.URL(), "BUILDKITE_API_TOKEN": fake.Token, "BUILDKITE_ORG": fake.Org, "BUILDKITE_PIPELINE": fake.Pipeline}
	tests := []struct {
		name string
		args []string
		code int
		want string // in stdout (exit 0) or stderr
	}{
		{"alias", []string{"h100", "--json"}, 0, `"total": 2`},
		{"alias table", []string{"h100"}, 0, "nvidia-h100  2       1     1     0"},
		{"canonical", []string{"nvidia-h100"}, 0, "nvidia-h100  2       1     1     0"},
		{"unknown queue", []string{"lab-queue"}, 2, `unknown queue "lab-queue"`},
		{"unknown queue allowed", []string{"lab-queue", "--allow-unknown-queue"}, 0, "lab-queue  1       1     0     0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := runKbgen(t, env, "", append([]string{"queues"}, tc.args...)...)
			out := res.stdout
			if tc.code != 0 {
				out = res.stderr
			}
			if res.code != tc.code || !strings.Contains(out, tc.want) {
				t.Fatalf("kbgen queues %v: exit %d, stdout %q, stderr %q; want exit %d with %q", tc.args, res.code, res.stdout, res.stderr, tc.code, tc.want)
			}
		})
	}
}
