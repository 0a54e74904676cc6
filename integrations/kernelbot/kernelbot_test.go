// Package kernelbot holds the Python launcher Kernelbot uses to run
// submissions through kbgen serve (kbgen_launcher.py). This Go test runs
// its Python tests against a real kbgen serve and the Buildkite stand-in.
package kernelbot

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

func TestPythonLauncher(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: the Kernelbot launcher's tests were not run")
	}
	root, _ := filepath.Abs("../..")
	bin := kbgenbin.Path(t)
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.Script{BootStart: 100 * time.Millisecond, Uploaded: 300 * time.Millisecond, EvalStart: 400 * time.Millisecond, Finish: 2 * time.Second, ResultInMetaData: true})
	fake.SetRateLimit(200)
	const token = "py-test-token"
	serve := exec.Command(bin, "serve", "--listen", "127.0.0.1:0", "--poll-interval", "100ms")
	serve.Env = []string{"PATH=" + os.Getenv("PATH"), "BUILDKITE_API_TOKEN=" + fake.Token, "BUILDKITE_ORG=" + fake.Org,
		"BUILDKITE_PIPELINE=" + fake.Pipeline, "BUILDKITE_API_URL=" + fake.URL(), "KBGEN_SERVER_TOKEN=" + token}
	pipe, _ := serve.StderrPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = serve.Process.Kill(); _ = serve.Wait() }()
	url := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			if _, rest, ok := strings.Cut(sc.Text(), "listening on "); ok {
				url <- strings.Fields(rest)[0]
			}
		}
	}()
	var addr string
	select {
	case addr = <-url:
	case <-time.After(20 * time.Second):
		t.Fatal("kbgen serve did not start")
	}
	cmd := exec.Command(py, "-m", "unittest", "-v", "test_launcher")
	cmd.Env = append(os.Environ(), "KBGEN_SERVER="+addr, "KBGEN_SERVER_TOKEN="+token,
		"KBGEN_TEST_JOB="+filepath.Join(root, "golden/cli/fixtures/job.json"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("python3 -m unittest -v test_launcher:\n%s", out)
	if err != nil {
		t.Fatalf("the launcher's Python tests failed: %v", err)
	}
	// A skipped test would mean the server env did not reach Python.
	if !strings.Contains(string(out), "\nOK") || strings.Contains(string(out), "skipped") || strings.Contains(string(out), "Ran 0 tests") {
		t.Fatal("not every Python test ran")
	}
	if n := fake.RateLimited(); n != 0 {
		t.Errorf("%d answers 429", n)
	}
}
