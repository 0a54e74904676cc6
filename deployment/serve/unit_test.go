package servedeploy

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// TestUnitVerifies: systemd-analyze verify finds nothing to say about the
// unit (an unknown key, a missing binary, a bad sandboxing value all
// print a line), with its binary at the built kbgen.
func TestUnitVerifies(t *testing.T) {
	sa := need(t, "systemd-analyze", "apt-get install systemd")
	dir := t.TempDir()
	unit := filepath.Join(dir, "kbgen-serve.service")
	writeFile(t, unit, render(t, "kbgen-serve.service", "ExecStart=/usr/local/bin/kbgen ", "ExecStart="+kbgenbin.Path(t)+" "), 0o644)
	out, err := runOutput(sa, "verify", "--man=no", unit)
	if err != nil && strings.Contains(out, "Failed to") && strings.Contains(out, "bus") {
		t.Skipf("systemd-analyze cannot run here: %s", out)
	}
	var problems []string
	for _, line := range strings.Split(out, "\n") {
		// network-online.target is not on a build machine.
		if line != "" && !strings.Contains(line, "network-online") {
			problems = append(problems, line)
		}
	}
	if err != nil || len(problems) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(problems, "\n"))
	}
}

// TestUnitCommandLine runs the unit's ExecStart as systemd would, with
// serve.env.example's settings and the token as a credential, against a
// local Buildkite: the flags and files it names work together.
func TestUnitCommandLine(t *testing.T) {
	fake := newFake(t, quiet)
	creds := t.TempDir()
	writeFile(t, filepath.Join(creds, "buildkite-token"), fake.Token+"\n", 0o600)
	args := execStart(t, render(t, "kbgen-serve.service", "--listen 127.0.0.1:8077", fmt.Sprintf("--listen 127.0.0.1:%d", freePort(t))))
	if args[0] != "/usr/local/bin/kbgen" {
		t.Fatalf("ExecStart runs %s, want /usr/local/bin/kbgen (docs/serve-deployment.md installs it there)", args[0])
	}
	for i, a := range args {
		args[i] = strings.ReplaceAll(a, "${CREDENTIALS_DIRECTORY}", creds)
	}
	env := envFile(t, "serve.env.example")
	env = append(env, "BUILDKITE_API_URL="+fake.URL(), "BUILDKITE_ORG="+fake.Org, "BUILDKITE_PIPELINE="+fake.Pipeline)
	log := startServe(t, env, args[1:]...)
	if strings.Contains(log.String(), fake.Token) {
		t.Errorf("the service logged the Buildkite token:\n%s", log.String())
	}
}

// envFile reads a systemd EnvironmentFile's assignments.
func envFile(t *testing.T, name string) []string {
	t.Helper()
	f, err := os.Open(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var env []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if line := strings.TrimSpace(sc.Text()); line != "" && !strings.HasPrefix(line, "#") {
			env = append(env, line)
		}
	}
	return env
}
