package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/steps"
)

// buildkiteAgent finds the real agent (bkagent.Installed), or skips.
func buildkiteAgent(t *testing.T) string {
	t.Helper()
	p, err := bkagent.Installed(os.Getenv)
	if err != nil {
		t.Skipf("%v; bootstrap integration test skipped", err)
	}
	return p
}

// agentJob is one job run by the real `buildkite-agent bootstrap`, as an
// agent runs it: checkout of a repository holding the gpu-docker plugin,
// the plugin's command hook, `kbgen sandbox`, docker.
type agentJob struct {
	env      map[string]string
	checkout string
	output   string
	code     int
}

// newAgentJob prepares a repository with this checkout's gpu-docker plugin,
// a PATH holding a static kbgen and the agent (named buildkite-agent, as
// hook wrappers call it), and the env an agent gives a job.
func newAgentJob(t *testing.T, image string, cfg plugincfg.GPUDocker, command string) *agentJob {
	t.Helper()
	agent := buildkiteAgent(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git; bootstrap integration test skipped")
	}
	root := t.TempDir()
	bin := filepath.Join(root, "bin")
	mustMkdir(t, bin)
	if err := os.Symlink(agent, filepath.Join(bin, "buildkite-agent")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(kbgenbin.Path(t), filepath.Join(bin, "kbgen")); err != nil {
		t.Fatal(err)
	}

	// The repository the job checks out: just the plugin, from this tree.
	repo := filepath.Join(root, "repo")
	plugin := filepath.Join(repo, ".buildkite", "plugins", "gpu-docker")
	mustMkdir(t, filepath.Join(plugin, "hooks"))
	for _, f := range []string{"plugin.yml", "hooks/command"} {
		b, err := os.ReadFile(filepath.Join("..", ".buildkite", "plugins", "gpu-docker", f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(plugin, f), b, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("init", "-q", "-b", "main")
	git("add", ".")
	git("commit", "-q", "-m", "plugin")
	commit := git("rev-parse", "HEAD")

	cfg.Image = image
	pluginsJSON, err := json.Marshal([]map[string]any{{"./.buildkite/plugins/gpu-docker": cfg}})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"builds", "hooks", "plugins", "sockets", "home", "tmp"} {
		mustMkdir(t, filepath.Join(root, d))
	}
	env := map[string]string{
		"PATH":                            bin + ":" + os.Getenv("PATH"),
		"HOME":                            filepath.Join(root, "home"),
		"TMPDIR":                          filepath.Join(root, "tmp"),
		"BUILDKITE":                       "true",
		"CI":                              "true",
		"BUILDKITE_JOB_ID":                fmt.Sprintf("0190a1b2-0000-4000-8000-%012x", time.Now().UnixNano()&0xffffffffffff),
		"BUILDKITE_BUILD_ID":              "0190a1b2-0000-4000-8000-000000000001",
		"BUILDKITE_BUILD_NUMBER":          "1",
		"BUILDKITE_AGENT_NAME":            "gpu-node-1-gpu0",
		"BUILDKITE_ORGANIZATION_SLUG":     "gpu-mode",
		"BUILDKITE_PIPELINE_SLUG":         "kernelbot",
		"BUILDKITE_PIPELINE_PROVIDER":     "git",
		"BUILDKITE_REPO":                  repo,
		"BUILDKITE_COMMIT":                commit,
		"BUILDKITE_BRANCH":                "main",
		"BUILDKITE_COMMAND":               command,
		"BUILDKITE_PLUGINS":               string(pluginsJSON),
		"BUILDKITE_BUILD_PATH":            filepath.Join(root, "builds"),
		"BUILDKITE_BIN_PATH":              bin,
		"BUILDKITE_HOOKS_PATH":            filepath.Join(root, "hooks"),
		"BUILDKITE_PLUGINS_PATH":          filepath.Join(root, "plugins"),
		"BUILDKITE_SOCKETS_PATH":          filepath.Join(root, "sockets"),
		"BUILDKITE_PLUGINS_ENABLED":       "true",
		"BUILDKITE_PLUGIN_VALIDATION":     "true",
		"BUILDKITE_LOCAL_HOOKS_ENABLED":   "true",
		"BUILDKITE_COMMAND_EVAL":          "true",
		"BUILDKITE_BOOTSTRAP_PHASES":      "checkout,plugin,command",
		"BUILDKITE_AGENT_ACCESS_TOKEN":    plantedSecret,
		"BUILDKITE_AGENT_ENDPOINT":        fakeAgentAPI(t),
		"BUILDKITE_GIT_CLEAN_FLAGS":       "-ffxdq",
		"KERNELBOT_RUN_ID":                "run-bootstrap",
		"KERNELBOT_QUEUE":                 "nvidia-l4",
		"BUILDKITE_AGENT_META_DATA_QUEUE": "nvidia-l4",
		"KBGEN_SANDBOX_NO_GPU":            "1",
		contract.EnvGPUIndex:              "0",
		contract.EnvGPUUUID:               "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b",
		contract.EnvCPUSet:                "0",
		contract.EnvMems:                  "0",
		contract.EnvMemory:                "512m",
	}
	return &agentJob{env: env, checkout: filepath.Join(root, "builds", "gpu-node-1-gpu0", "gpu-mode", "kernelbot")}
}

// fakeAgentAPI answers the agent API calls the checkout makes (it asks
// whether the build has its commit meta-data; "yes" means nothing more is
// sent). The sandbox itself never talks to it. It refuses the publish's
// meta-data set (404: buildkite-agent v3.52.1's clicommand/meta_data_set.go
// gives up at once on a 401 or 404 and retries anything else for 45 s) and, answering no artifact batch, every
// upload: so the hook's fallback runs, result.json in the job directory
// for the step's artifact_paths.
func fakeAgentAPI(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if strings.HasSuffix(r.URL.Path, "/data/set") {
			w.WriteHeader(http.StatusNotFound)
			_, _ = io.WriteString(w, `{"message": "meta-data refused (stand-in)"}`)
			return
		}
		_, _ = io.WriteString(w, `{"exists": true}`)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v3"
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

// run runs `buildkite-agent bootstrap` with exactly the job's env.
func (j *agentJob) run(t *testing.T) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(strings.SplitN(j.env["PATH"], ":", 2)[0], "buildkite-agent"), "bootstrap")
	for k, v := range j.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	j.output = string(out)
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		j.code = ee.ExitCode()
	default:
		t.Fatalf("bootstrap: %v\n%s", err, out)
	}
	if ctx.Err() != nil {
		t.Fatalf("bootstrap timed out:\n%s", out)
	}
}

func smallConfig() plugincfg.GPUDocker {
	return plugincfg.GPUDocker{Runtime: "nvidia", GPUs: 1, CPUs: 1, Memory: "256m", ShmSize: "16m", PidsLimit: 256, Network: "none"}
}

// TestBootstrapEvalStep runs the eval step as an agent would: checkout,
// the gpu-docker plugin's command hook, `kbgen sandbox`, the container
// running `kbgen run` on the payload from the build env. The busybox
// image has no Python, so the runner reports that in result.json; what is
// proven is the path: hook → sandbox → container → kbgen run → result.json
// and the exit code back in the job directory.
func TestBootstrapEvalStep(t *testing.T) {
	image := testimage.Busybox(t)
	j := newAgentJob(t, image, smallConfig(), steps.RunCommand)
	enc, err := payload.Encode([]byte(`{"lang": "py", "mode": "test", "sources": {"eval.py": "print(1)", "submission.py": "x = 1"}, "main": "eval.py", "tests": [{"n": 1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range payload.SplitEnv(enc) {
		j.env[k] = v
	}
	j.run(t)
	t.Logf("bootstrap exit %d; log tail:\n%s", j.code, tail(j.output, 25))
	if !strings.Contains(j.output, "kbgen run: wrote /kbgen/out/result.json") {
		t.Fatalf("the container did not run kbgen run to the end:\n%s", j.output)
	}
	// The hook published from the host (the fake API then refuses it,
	// which must not change the exit status, and the step's artifact_paths
	// uploads the hook's copy).
	if !strings.Contains(j.output, "meta-data refused (stand-in)") || !strings.Contains(j.output, "gpu-docker: publishing result.json failed; artifact_paths uploads it from the job directory") {
		t.Errorf("the hook did not publish result.json from the job directory:\n%s", tail(j.output, 30))
	}
	b, err := os.ReadFile(filepath.Join(j.checkout, contract.ResultFile))
	if err != nil {
		t.Fatalf("no result.json in the job directory %s: %v\n%s", j.checkout, err, j.output)
	}
	var res payload.FullResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("result.json is not a FullResult: %v\n%s", err, b)
	}
	t.Logf("result: success=%v error=%q system=%+v", res.Success, res.Error, res.System)
	if strings.Contains(string(b), plantedSecret) || strings.Contains(j.output, plantedSecret) {
		t.Error("the agent token reached the container's result or the job log")
	}
	// Busybox has no python3: the runner fails the job as this machine's
	// fault (75, retried elsewhere), says why in result.json, and that
	// status comes back through the sandbox and the hook.
	if res.Success || !strings.Contains(res.Error, "python3") {
		t.Errorf("result.json: success=%v error=%q, want a runner failure naming python3", res.Success, res.Error)
	}
	if j.code != exitcode.TempFail {
		t.Errorf("bootstrap exit %d, want the runner's %d\n%s", j.code, exitcode.TempFail, j.output)
	}
}

// TestBootstrapRefusesWithoutPlacement: an agent whose environment hook
// exports no placement fails the job with 75 (retried elsewhere), and no
// container starts.
func TestBootstrapRefusesWithoutPlacement(t *testing.T) {
	testimage.RequireDocker(t)
	j := newAgentJob(t, "kbgen-test-never-run:latest", smallConfig(), steps.RunCommand)
	delete(j.env, contract.EnvCPUSet)
	j.env[contract.EnvPayload] = "unused"
	j.run(t)
	if j.code != 75 || !strings.Contains(j.output, "KERNELBOT_CPUSET is not set") {
		t.Errorf("bootstrap exit %d, want 75 with the missing placement named:\n%s", j.code, j.output)
	}
}

// TestBootstrapWithoutKbgen: the hook says what is missing and exits 75.
func TestBootstrapWithoutKbgen(t *testing.T) {
	j := newAgentJob(t, "kbgen-test-never-run:latest", smallConfig(), steps.RunCommand)
	bin := strings.SplitN(j.env["PATH"], ":", 2)[0]
	if err := os.Remove(filepath.Join(bin, "kbgen")); err != nil {
		t.Fatal(err)
	}
	// Keep git and the shell, drop anything that might hold a kbgen.
	j.env["PATH"] = bin + ":/usr/bin:/bin"
	// With plugin validation on, the agent itself refuses first (exit 1)
	// because plugin.yml lists kbgen under requirements; agents run without
	// it by default, and then the hook's own check answers.
	j.env["BUILDKITE_PLUGIN_VALIDATION"] = "false"
	j.run(t)
	if j.code != 75 || !strings.Contains(j.output, "kbgen is not installed on this agent host") {
		t.Errorf("bootstrap exit %d, want 75 with a clear message:\n%s", j.code, j.output)
	}
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// TestBootstrapPythonJob is the whole eval step with a built-in example
// that passes: the real agent, the hook, the sandbox, `kbgen run` in a
// Debian image with python3 (its full standard library: the examples'
// harness needs json and ctypes), every test case's verdict in result.json
// and exit 0. It needs the debootstrap image (testimage.Python:
// KBGEN_TEST_PYTHON_IMAGE=1).
func TestBootstrapPythonJob(t *testing.T) {
	image := testimage.Python(t)
	j := newAgentJob(t, image, smallConfig(), steps.RunCommand)
	in, err := jobsource.Load(jobsource.Source{Example: "identity", Submission: examples.DefaultSubmission, Mode: payload.ModeTest}, jobsource.Options{})
	if err != nil {
		t.Fatal(err)
	}
	enc := in.Encoded
	for k, v := range payload.SplitEnv(enc) {
		j.env[k] = v
	}
	j.run(t)
	b, err := os.ReadFile(filepath.Join(j.checkout, contract.ResultFile))
	if err != nil {
		t.Fatalf("no result.json in the job directory: %v\n%s", err, tail(j.output, 30))
	}
	var res payload.FullResult
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatalf("result.json is not a FullResult: %v\n%s", err, b)
	}
	run := res.Runs["test"].Run
	if j.code != 0 || !res.Success || run == nil || !run.Passed {
		t.Fatalf("bootstrap exit %d, result %s\n%s", j.code, b, tail(j.output, 30))
	}
	// Every case of the task was checked, not just a verdict line forged.
	for i := range in.Config.Tests {
		if got := run.Result[fmt.Sprintf("test.%d.status", i)]; got != "pass" {
			t.Errorf("test.%d.status = %q, want pass (result %v)", i, got, run.Result)
		}
	}
}

// TestBootstrapCancel: cancelling the job (SIGTERM to the bootstrap, as
// the agent does) stops the real container, and the hook returns the
// sandbox's status instead of abandoning it.
func TestBootstrapCancel(t *testing.T) {
	image := testimage.Busybox(t)
	j := newAgentJob(t, image, smallConfig(), "sleep 300")
	name := dockerargv.ContainerName(j.env["BUILDKITE_JOB_ID"])
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })

	cmd := exec.Command(filepath.Join(strings.SplitN(j.env["PATH"], ":", 2)[0], "buildkite-agent"), "bootstrap")
	for k, v := range j.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var out syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running := func() bool {
		b, _ := exec.Command("docker", "ps", "-q", "--filter", "name=^"+name+"$").Output()
		return len(strings.TrimSpace(string(b))) > 0
	}
	deadline := time.Now().Add(60 * time.Second)
	for !running() {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			t.Fatalf("the container never started:\n%s", out.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	start := time.Now()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("bootstrap did not end after SIGTERM:\n%s", out.String())
	}
	t.Logf("bootstrap ended %v after SIGTERM; log tail:\n%s", time.Since(start).Round(time.Millisecond), tail(out.String(), 8))
	if running() {
		t.Errorf("container %s still running after the job was cancelled", name)
	}
	if !strings.Contains(out.String(), "stopping container "+name) {
		t.Errorf("the sandbox did not stop the container by name:\n%s", tail(out.String(), 20))
	}
	if !strings.Contains(out.String(), "exited with status 143") {
		t.Errorf("the hook did not return the sandbox's 143:\n%s", tail(out.String(), 20))
	}
}

// TestBootstrapPlantedHooks: a submission that plants the gpu-docker
// plugin's post-command and pre-exit hooks and a .git/config with
// core.fsmonitor in its out dir (which the sandbox used to copy into the
// checkout) gets nothing onto the host: through the real agent's
// bootstrap and the repository's plugin, no planted file reaches the
// checkout, none runs, and the forged result.json is not what the job
// leaves.
func TestBootstrapPlantedHooks(t *testing.T) {
	image := testimage.ShellPython(t)
	j := newAgentJob(t, image, smallConfig(), steps.RunCommand)
	pwned := filepath.Join(j.env["HOME"], "PWNED")
	submission := `o=/kbgen/out
mkdir -p $o/.buildkite/plugins/gpu-docker/hooks $o/.git
for h in post-command pre-exit; do
  printf '#!/bin/sh\ntouch ` + pwned + `-%s\n' $h > $o/.buildkite/plugins/gpu-docker/hooks/$h
  chmod +x $o/.buildkite/plugins/gpu-docker/hooks/$h
done
printf '[core]\n\tfsmonitor = touch ` + pwned + `-fsmonitor\n' > $o/.git/config
echo '` + forgedPass + `' > $o/result.json
`
	enc := encodedPyJob(t, submission, "exit 0\n")
	for k, v := range payload.SplitEnv(enc) {
		j.env[k] = v
	}
	j.run(t)
	t.Logf("bootstrap exit %d; log tail:\n%s", j.code, tail(j.output, 12))
	if !strings.Contains(j.output, "kbgen sandbox: the result sealed by kbgen run verifies") {
		t.Fatalf("the job did not run to a vouched result:\n%s", tail(j.output, 30))
	}
	for _, h := range []string{"post-command", "pre-exit"} {
		if _, err := os.Stat(filepath.Join(j.checkout, ".buildkite/plugins/gpu-docker/hooks", h)); !os.IsNotExist(err) {
			t.Errorf("planted hook %s is in the checkout: %v", h, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(j.checkout, ".git", "config")); strings.Contains(string(b), "fsmonitor") {
		t.Errorf("planted .git/config reached the checkout:\n%s", b)
	}
	if found, _ := filepath.Glob(pwned + "*"); len(found) != 0 {
		t.Errorf("a planted hook ran on the host: %v", found)
	}
	// The fake Agent API refuses the publish, so the hook leaves the
	// sandbox's result.json for artifact_paths: the runner's, not the
	// forged one.
	b, err := os.ReadFile(filepath.Join(j.checkout, contract.ResultFile))
	if err != nil || strings.Contains(string(b), forgedMarker) {
		t.Errorf("result.json in the checkout: %v\n%s", err, b)
	}
	ents, _ := os.ReadDir(j.checkout)
	for _, e := range ents {
		if !slices.Contains([]string{".git", ".buildkite", contract.ResultFile}, e.Name()) {
			t.Errorf("the checkout holds %s, which the repository does not", e.Name())
		}
	}
}
