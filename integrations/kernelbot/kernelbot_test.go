package kernelbot

import (
	"bufio"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/registry"
)

// standinTree lays out a Kernelbot-shaped tree: testdata/standin's
// libkernelbot (Kernelbot's dataclasses and base classes, field for
// field), its consts.py completed with the lines the patch adds, and the
// patch's new files (launchers/buildkite.py, tests/test_buildkite.py).
func standinTree(t *testing.T) string {
	t.Helper()
	root := t.TempDir()
	copyTree(t, os.DirFS("testdata/standin"), ".", filepath.Join(root, "src"))
	sub, err := fs.Sub(tree, "tree")
	if err != nil {
		t.Fatal(err)
	}
	copyTree(t, sub, ".", root)
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	gpus, err := GPUs(reg)
	if err != nil {
		t.Fatal(err)
	}
	consts := filepath.Join(root, "src/libkernelbot/consts.py")
	base, err := os.ReadFile(consts)
	if err != nil {
		t.Fatal(err)
	}
	lines := append(ConstsBlock(gpus), "", "", LookupLine, "", "GPU_TO_SM = {")
	lines = append(append(lines, SMLines(gpus)...), "}", "")
	if err := os.WriteFile(consts, append(base, []byte(strings.Join(lines, "\n"))...), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

func copyTree(t *testing.T, fsys fs.FS, from, to string) {
	t.Helper()
	err := fs.WalkDir(fsys, from, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.Contains(p, "__pycache__") {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		dst := filepath.Join(to, p)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// python finds a python3 that has modules: the one on PATH, else the
// system's (pyenv's shim may stand first on PATH without them).
func python(t *testing.T, modules ...string) string {
	t.Helper()
	var tried []string
	for _, name := range []string{"python3", "/usr/bin/python3"} {
		py, err := exec.LookPath(name)
		if err != nil {
			continue
		}
		if len(modules) == 0 {
			return py
		}
		out, err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput()
		if err == nil {
			return py
		}
		tried = append(tried, py+": "+lastLine(string(out)))
	}
	if len(tried) == 0 {
		t.Skip("python3 not installed: the Kernelbot launcher's tests were not run")
	}
	t.Skipf("no python3 with %s (apt-get install python3-pytest python3-pytest-asyncio): %s", strings.Join(modules, ", "), strings.Join(tried, "; "))
	return ""
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestKernelbotStyleTests runs the patch's tests/test_buildkite.py (pytest,
// pytest-asyncio, mocks: Kernelbot's CI once merged) against the stand-in
// types.
func TestKernelbotStyleTests(t *testing.T) {
	py := python(t, "pytest", "pytest_asyncio", "aiohttp")
	root := standinTree(t)
	cmd := exec.Command(py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_buildkite.py")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "src"), "PYTHONDONTWRITEBYTECODE=1")
	out, err := cmd.CombinedOutput()
	t.Logf("pytest tests/test_buildkite.py:\n%s", out)
	if err != nil {
		t.Fatalf("the launcher's Kernelbot-style tests failed: %v", err)
	}
	if !strings.Contains(string(out), " passed") || strings.Contains(string(out), "skipped") {
		t.Fatal("not every test ran")
	}
}

// TestPythonLauncher runs test_launcher.py: the patch's BuildkiteLauncher
// against a real kbgen serve and the Buildkite stand-in.
func TestPythonLauncher(t *testing.T) {
	py := python(t, "aiohttp")
	root := standinTree(t)
	bin := kbgenbin.Path(t)
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	fake.SetScript(fakebuildkite.Script{BootStart: 100 * time.Millisecond, Uploaded: 300 * time.Millisecond, EvalStart: 400 * time.Millisecond, Finish: 2 * time.Second, ResultInMetaData: true})
	fake.SetRateLimit(200)
	fake.SetAgents([]fakebuildkite.AgentSpec{
		{Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100", BusyWith: "eval"},
		{Name: "h100-gpu1", Version: "3.52.1", Queue: "nvidia-h100"},
	})
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
	here, _ := os.Getwd()
	cmd := exec.Command(py, "-m", "unittest", "-v", "test_launcher")
	cmd.Dir = here
	cmd.Env = append(os.Environ(), "KBGEN_SERVER="+addr, "KBGEN_SERVER_TOKEN="+token,
		"KBGEN_TEST_JOB="+filepath.Join(here, "../../golden/cli/fixtures/job.json"), "PYTHONDONTWRITEBYTECODE=1",
		"PYTHONPATH="+filepath.Join(root, "src"))
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
	if n := fake.CountRequests("GET", "/agents"); n != 1 {
		t.Errorf("%d agent list requests for the queue status calls; want 1 (serve's cached view)", n)
	}
}

// TestResultContract runs scripts/kernelbot-check/contract.py against the
// stand-in types: every FullResult kbgen keeps as a golden file converts
// strictly into Kernelbot's dataclasses, and a result with a field they
// lack fails the check (the launcher itself only drops such a field).
func TestResultContract(t *testing.T) {
	py := python(t, "aiohttp")
	root := standinTree(t)
	here, _ := os.Getwd()
	kbgen := filepath.Join(here, "..", "..")
	bad := t.TempDir()
	result := `{"success": true, "error": "", "system": {"gpu": "H100", "numa": [0]}, "runs": {}}`
	if err := os.WriteFile(filepath.Join(bad, "result.json"), []byte(result), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"init", "-q"}, {"add", "result.json"}} {
		if out, err := exec.Command("git", append([]string{"-C", bad}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	tests := []struct {
		name, dir, want string
		fails           bool
	}{
		{name: "kbgen's golden results", dir: kbgen, want: "kbgen results are Kernelbot's FullResult"},
		{name: "a field Kernelbot lacks", dir: bad, want: "system has fields SystemInfo lacks: numa", fails: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(py, filepath.Join(kbgen, "scripts", "kernelbot-check", "contract.py"), tc.dir)
			cmd.Env = append(os.Environ(), "PYTHONPATH="+filepath.Join(root, "src"), "PYTHONDONTWRITEBYTECODE=1")
			out, err := cmd.CombinedOutput()
			if (err != nil) != tc.fails || !strings.Contains(string(out), tc.want) {
				t.Fatalf("contract.py %s: err %v; want failure %v and %q in:\n%s", tc.dir, err, tc.fails, tc.want, out)
			}
		})
	}
}
