package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/internal/testimage"
)

// TestRehearsal is the operator's rehearsal of docs/buildkite-setup.md as
// processes: kbgen-e2e buildkite with a control agent and a GPU node's
// agent from `kbgen node install --root`, kbgen serve with its webhook,
// and kbgen submit --server. One build: it must start from the settings
// steps (the bootstrap's command is theirs, on the control agent), come
// back through serve, and the webhooks must be accepted.
func TestRehearsal(t *testing.T) {
	testimage.RequireDocker(t)
	agentBin, err := bkagent.Installed(os.Getenv)
	if err != nil {
		t.Skipf("%v; rehearsal skipped", err)
	}
	image := testimage.Python(t)
	kbgen, companion := kbgenbin.Path(t), kbgenbin.E2EPath(t)
	setup, start := rehearsalDoc(t)
	dir := rehearsalRoot(t, image, kbgen, companion, agentBin)
	path := "PATH=" + filepath.Join(dir, "bin") + ":" + os.Getenv("PATH")
	runSetup(t, dir, path, setup)
	for _, staged := range []string{"rehearsal/stage-control", "rehearsal/stage-node"} {
		if _, err := os.Stat(filepath.Join(dir, staged)); err != nil {
			t.Fatalf("the documented setup left no %s: %v", staged, err)
		}
	}
	serveAddr := freeAddr(t)
	// The documented line, on free ports and this test's serve address
	// (a later flag wins in kong).
	rehearsal := exec.Command(companion, append(start, "--listen", "127.0.0.1:0", "--agent-listen", "127.0.0.1:0",
		"--webhook", "http://"+serveAddr+"/v1/buildkite/webhook")...)
	rehearsal.Dir, rehearsal.Env = dir, append(os.Environ(), path)
	stderr := &syncbuf.Buffer{}
	rehearsal.Stderr = stderr
	stdout, err := rehearsal.StdoutPipe()
	must(t, err)
	must(t, rehearsal.Start())
	t.Cleanup(func() { _ = rehearsal.Process.Kill(); _ = rehearsal.Wait() })
	env := readExports(t, stdout, stderr)
	t.Cleanup(func() {
		for _, j := range buildJobs(t, env) {
			_ = exec.Command("docker", "rm", "-f", "kbgen-"+j.ID).Run()
		}
	})

	serve := exec.Command(kbgen, "serve", "--listen", serveAddr)
	serve.Env = append(os.Environ(), env...)
	serveLog := &syncbuf.Buffer{}
	serve.Stdout, serve.Stderr = serveLog, serveLog
	must(t, serve.Start())
	t.Cleanup(func() { _ = serve.Process.Kill(); _ = serve.Wait() })
	// Submit once serve listens: started and submitted at once, a loaded
	// machine had submit's POST refused before serve's listener was up.
	waitFor(t, 30*time.Second, func() bool { return strings.Contains(serveLog.String(), "listening on") }, "kbgen serve never listened:\n"+serveLog.String())

	submit := exec.Command(kbgen, "submit", "--server", "http://"+serveAddr, "--queue", "nvidia-l40s", "--example", "identity", "--mode", "test", "--timeout", "4m")
	submit.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	submit.Stdout, submit.Stderr = &out, &errb
	var result struct{ Success bool }
	if err := submit.Run(); err != nil || json.Unmarshal(out.Bytes(), &result) != nil || !result.Success {
		t.Fatalf("kbgen submit --server: %v\n%s\n%s\nrehearsal:\n%s\nserve:\n%s", err, out.String(), errb.String(), stderr.String(), serveLog.String())
	}
	checkJobs(t, buildJobs(t, env))
	waitFor(t, 10*time.Second, func() bool { return strings.Contains(stderr.String(), "delivered, 0 failed") }, "no webhook delivered:\n"+stderr.String())

	// Interrupted, it stops its agents and exits 0.
	must(t, rehearsal.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- rehearsal.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("kbgen-e2e buildkite after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Errorf("kbgen-e2e buildkite still running 60 s after SIGTERM")
	}
}

// readExports reads the rehearsal's stdout up to its "serving" line and
// returns its export lines as NAME=value.
func readExports(t *testing.T, stdout interface{ Read([]byte) (int, error) }, stderr *syncbuf.Buffer) []string {
	t.Helper()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var env []string
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kbgen-e2e buildkite ended before serving:\n%s", stderr.String())
			}
			if kv, found := strings.CutPrefix(l, "export "); found {
				env = append(env, kv)
			}
			if strings.HasPrefix(l, "# serving") {
				go func() {
					for range lines {
					}
				}()
				return env
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("kbgen-e2e buildkite did not start in 60 s:\n%s", stderr.String())
		}
	}
}

type restJob struct {
	ID      string `json:"id"`
	StepKey string `json:"step_key"`
	Command string `json:"command"`
	State   string `json:"state"`
	Agent   struct {
		Name string `json:"name"`
	} `json:"agent"`
}

// buildJobs lists every job of every build, through the rehearsal's REST
// API as kbgen reads it.
func buildJobs(t *testing.T, env []string) []restJob {
	t.Helper()
	get := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		get[k] = v
	}
	url := fmt.Sprintf("%sv2/organizations/%s/pipelines/%s/builds", get[contract.EnvAPIURL], get[contract.EnvOrg], get[contract.EnvPipeline])
	req, err := http.NewRequest(http.MethodGet, url, nil)
	must(t, err)
	req.Header.Set("Authorization", "Bearer "+get[contract.EnvAPIToken])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Logf("listing builds: %v", err)
		return nil
	}
	defer resp.Body.Close()
	var builds []struct{ Jobs []restJob }
	if err := json.NewDecoder(resp.Body).Decode(&builds); err != nil {
		t.Logf("listing builds: %v", err)
	}
	var jobs []restJob
	for _, b := range builds {
		jobs = append(jobs, b.Jobs...)
	}
	return jobs
}

// checkJobs: the build ran the settings steps' bootstrap on the control
// agent and the eval step on the GPU node's agent.
func checkJobs(t *testing.T, jobs []restJob) {
	t.Helper()
	var keys []string
	for _, j := range jobs {
		keys = append(keys, j.StepKey+"@"+j.Agent.Name)
		switch j.StepKey {
		case contract.BootstrapStepKey:
			if j.Command != "kbgen generate --upload" || !strings.Contains(j.Agent.Name, "control") || j.State != "passed" {
				t.Errorf("bootstrap: command %q on %q, %s; want the settings steps' command on the control agent, passed", j.Command, j.Agent.Name, j.State)
			}
		case contract.EvalStepKey:
			if !strings.Contains(j.Agent.Name, "gpu0") || j.State != "passed" {
				t.Errorf("eval on %q, %s; want the node's gpu0 agent, passed", j.Agent.Name, j.State)
			}
		}
	}
	if len(jobs) != 2 {
		t.Errorf("jobs %v, want a bootstrap and an eval", keys)
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

func waitFor(t *testing.T, d time.Duration, ok func() bool, msg string) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Error(msg)
}

// rehearsalDoc is docs/buildkite-setup.md's rehearsal as printed: the
// setup block's lines, and the arguments of its kbgen-e2e buildkite line.
func rehearsalDoc(t *testing.T) (setup, start []string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(srcRoot(t), "docs", "buildkite-setup.md"))
	must(t, err)
	_, section, ok := strings.Cut(string(doc), "\n## A rehearsal without a Buildkite account\n")
	if !ok {
		t.Fatal("docs/buildkite-setup.md has no rehearsal section")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	blocks := strings.Split(section, "```")
	if len(blocks) < 4 {
		t.Fatal("the rehearsal section has fewer than two code blocks")
	}
	setup = strings.Split(strings.TrimSpace(blocks[1]), "\n")
	line := strings.TrimSpace(blocks[3])
	args, ok := strings.CutPrefix(line, "kbgen-e2e ")
	if !ok {
		t.Fatalf("the second block is not the kbgen-e2e line: %q", line)
	}
	return setup, strings.Fields(args)
}

// rehearsalRoot is a directory laid out like the repository root for the
// rehearsal: node/testdata/rehearsal with the local test image in place
// of python:3.12-slim (no registry to pull from here).
func rehearsalRoot(t *testing.T, image, kbgen, companion, agent string) string {
	t.Helper()
	dir := t.TempDir()
	fixture := filepath.Join(srcRoot(t), "node", "testdata", "rehearsal")
	staged := filepath.Join(dir, "node", "testdata", "rehearsal")
	must(t, os.CopyFS(staged, os.DirFS(fixture)))
	vendors, err := os.ReadFile(filepath.Join(fixture, "vendors.yaml"))
	must(t, err)
	must(t, os.WriteFile(filepath.Join(staged, "vendors.yaml"), bytes.ReplaceAll(vendors, []byte("python:3.12-slim"), []byte(image)), 0o644))
	must(t, os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	for name, target := range map[string]string{"kbgen": kbgen, "kbgen-e2e": companion, "agent": agent} {
		must(t, os.Symlink(target, filepath.Join(dir, "bin", name)))
	}
	return dir
}

// runSetup runs the documented setup lines in order in one shell, as a
// reader pastes them, except the two that fetch and build (the binaries
// are this test's, already in bin/; bin/agent stands for what go install
// would put there, so the documented mv runs).
func runSetup(t *testing.T, dir, path string, lines []string) {
	t.Helper()
	var script []string
	for _, l := range lines {
		if strings.Contains(l, " go build ") || strings.Contains(l, " go install ") {
			continue
		}
		script = append(script, l)
	}
	if len(script) < 5 {
		t.Fatalf("only %d setup lines in the doc: %q", len(script), script)
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", strings.Join(script, "\n"))
	cmd.Dir, cmd.Env = dir, append(os.Environ(), path)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("the documented setup failed: %v\n%s", err, out)
	} else if strings.Contains(string(out), "will refuse its steps") {
		t.Errorf("the documented node install says the sandbox will refuse its steps:\n%s", out)
	}
}
