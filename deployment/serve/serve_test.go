// Package servedeploy holds the tests of kbgen serve's deployment files
// (docs/serve-deployment.md): the container image, the systemd unit and
// the nginx configuration, each run with the real tool.
package servedeploy

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
)

const serverToken = "deploy-test-server-token"

// quiet is a build whose eval job runs forever: after its first events
// its stream carries nothing but heartbeats.
var quiet = fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Never: true}

// newFake is a local Buildkite whose builds run as sc.
func newFake(t *testing.T, sc fakebuildkite.Script) *fakebuildkite.Server {
	t.Helper()
	fake := fakebuildkite.New(nil)
	t.Cleanup(fake.Close)
	fake.SetScript(sc)
	return fake
}

// buildkiteEnv is kbgen serve's environment for fake (the Buildkite
// token included: tests that pass it otherwise drop it).
func buildkiteEnv(fake *fakebuildkite.Server) []string {
	return []string{"BUILDKITE_API_TOKEN=" + fake.Token, "BUILDKITE_ORG=" + fake.Org, "BUILDKITE_PIPELINE=" + fake.Pipeline,
		"BUILDKITE_API_URL=" + fake.URL(), "KBGEN_SERVER_TOKEN=" + serverToken}
}

// freePort is a loopback port nothing listens on now.
func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startServe runs `kbgen ARGS...` (a kbgen serve) with env and waits for
// its "listening on" line; it is killed when the test ends.
func startServe(t *testing.T, env []string, args ...string) *syncbuf.Buffer {
	t.Helper()
	cmd := exec.Command(kbgenbin.Path(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	pipe, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	log := &syncbuf.Buffer{}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			log.Write([]byte(sc.Text() + "\n"))
			if strings.Contains(sc.Text(), "listening on ") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(20 * time.Second):
		t.Fatalf("kbgen %s did not start:\n%s", strings.Join(args, " "), log.String())
	}
	return log
}

// need skips the test, visibly, when tool is not installed here.
func need(t *testing.T, tool, install string) string {
	t.Helper()
	p, err := exec.LookPath(tool)
	if err != nil {
		t.Skipf("%s not installed: not tested here (%s)", tool, install)
	}
	return p
}

// run runs a command and fails the test with its output when it fails.
func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// render is the deployment file name with each old replaced by its new;
// each old must be there exactly once, so a change of the file's shape
// fails the test instead of testing something else.
func render(t *testing.T, name string, pairs ...string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for i := 0; i < len(pairs); i += 2 {
		if n := strings.Count(s, pairs[i]); n != 1 {
			t.Fatalf("%s has %q %d times, want once", name, pairs[i], n)
		}
		s = strings.Replace(s, pairs[i], pairs[i+1], 1)
	}
	return s
}

func writeFile(t *testing.T, path, content string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

// execStart is the unit's ExecStart command line.
func execStart(t *testing.T, unit string) []string {
	t.Helper()
	for _, line := range strings.Split(unit, "\n") {
		if rest, ok := strings.CutPrefix(line, "ExecStart="); ok {
			return strings.Fields(rest)
		}
	}
	t.Fatal("the unit has no ExecStart")
	return nil
}

// fmtDuration is d as docker's --health-* flags take it.
func fmtDuration(d time.Duration) string { return fmt.Sprintf("%dms", d.Milliseconds()) }

// abs is name under this directory, absolute.
func abs(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// runOutput runs a command and returns its output and error.
func runOutput(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}
