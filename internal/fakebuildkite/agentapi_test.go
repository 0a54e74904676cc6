package fakebuildkite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/signing"
)

// agentBinary finds the real buildkite-agent (bkagent.Installed), or skips.
func agentBinary(t *testing.T) string {
	t.Helper()
	p, err := bkagent.Installed(os.Getenv)
	if err != nil {
		t.Skipf("%v; live Agent API tests skipped", err)
	}
	return p
}

// gitRepo makes a repository holding files, for agents to check out.
func gitRepo(t *testing.T, files map[string]string) string {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git; live Agent API tests skipped")
	}
	dir := t.TempDir()
	for name, content := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "."}, {"commit", "-q", "-m", "init"}} {
		cmd := exec.Command("git", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v: %s", args, err, out)
		}
	}
	return dir
}

type testAgent struct {
	cmd *exec.Cmd
	out *bytes.Buffer
}

// startAgent runs `buildkite-agent start` against s until the test ends,
// with more start flags when given.
func startAgent(t *testing.T, s *Server, name, queue string, args ...string) *testAgent {
	t.Helper()
	bin := agentBinary(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "none.cfg"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "start", "--token", s.AgentToken(), "--endpoint", s.AgentEndpoint(), "--name", name,
		"--tags", "queue="+queue, "--build-path", filepath.Join(dir, "builds"), "--hooks-path", filepath.Join(dir, "hooks"),
		"--plugins-path", filepath.Join(dir, "plugins"), "--no-color", "--no-ssh-keyscan", "--cancel-grace-period", "2")
	cmd.Args = append(cmd.Args, args...)
	cmd.Env = append(os.Environ(), "HOME="+dir, "BUILDKITE_AGENT_CONFIG="+filepath.Join(dir, "none.cfg"))
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &testAgent{cmd: cmd, out: out}
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("agent %s log:\n%s", name, out.String())
		}
	})
	return a
}

// rest calls the REST API of s.
func rest(t *testing.T, s *Server, method, path string, body any) map[string]any {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, s.URL()+"v2/organizations/"+s.Org+"/pipelines/"+s.Pipeline+"/"+path, rd)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&out)
	return out
}

func createBuild(t *testing.T, s *Server, env map[string]string) int {
	t.Helper()
	b := rest(t, s, "POST", "builds", map[string]any{"commit": "HEAD", "branch": "main", "message": "t", "env": env})
	n, ok := b["number"].(float64)
	if !ok {
		t.Fatalf("create: %v", b)
	}
	return int(n)
}

// waitBuild polls until build n is in a final state.
func waitBuild(t *testing.T, s *Server, n int, limit time.Duration) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for {
		b := rest(t, s, "GET", fmt.Sprintf("builds/%d", n), nil)
		switch b["state"] {
		case "passed", "failed", "canceled":
			return b
		}
		select {
		case <-ctx.Done():
			t.Fatalf("build %d still %v after %s; jobs %+v", n, b["state"], limit, s.Jobs(n))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func newLive(t *testing.T, pipeline string, opts Options, files ...string) *Server {
	t.Helper()
	repo := map[string]string{".buildkite/pipeline.yml": pipeline, "hello.sh": "#!/bin/sh\necho hello from the checkout\n"}
	for i := 0; i+1 < len(files); i += 2 {
		repo[files[i]] = files[i+1]
	}
	opts.Repo = gitRepo(t, repo)
	s, err := NewLive(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return s
}

// TestLiveUploadRoutesByQueue: the pipeline's step runs on the agent of
// its queue, uploads two steps (one for each queue, the second after a
// wait), sets meta-data, annotates and uploads an artifact the REST API
// then serves through the storage redirect.
func TestLiveUploadRoutesByQueue(t *testing.T) {
	s := newLive(t, `steps:
  - key: boot
    command: >-
      ./hello.sh && printf 'steps:\n  - key: gpu\n    command: echo gpu-$$KERNELBOT_X > out.txt && buildkite-agent meta-data set k v\n    agents: {queue: "gpu"}\n    artifact_paths: out.txt\n  - wait\n  - key: after\n    command: buildkite-agent meta-data get k && buildkite-agent annotate --context c done\n    agents: {queue: "gpu"}\n' | buildkite-agent pipeline upload
    agents:
      queue: "${CONTROL:-default}"
`, Options{})
	startAgent(t, s, "control-1", "control")
	startAgent(t, s, "gpu-1", "gpu")
	n := createBuild(t, s, map[string]string{"CONTROL": "control", "KERNELBOT_X": "42"})
	b := waitBuild(t, s, n, time.Minute)
	jobs := s.Jobs(n)
	if b["state"] != "passed" {
		t.Fatalf("build %v; jobs %+v", b["state"], jobs)
	}
	want := map[string]string{"boot": "control-1", "gpu": "gpu-1", "after": "gpu-1"}
	if len(jobs) != 3 {
		t.Fatalf("%d jobs, want 3: %+v", len(jobs), jobs)
	}
	for _, j := range jobs {
		if want[j.Key] != j.Agent {
			t.Errorf("job %s ran on %q, want %q", j.Key, j.Agent, want[j.Key])
		}
	}
	if !strings.Contains(jobs[0].Log, "hello from the checkout") {
		t.Errorf("boot log lacks the checkout's script output:\n%s", jobs[0].Log)
	}
	if a := s.Annotations(n)["c"]; a.Body != "done" {
		t.Errorf("annotation %+v", a)
	}
	if !jobs[2].Started.After(jobs[1].Finished) && !jobs[2].Started.Equal(jobs[1].Finished) {
		t.Errorf("the step after the wait started %s, before the gpu step finished %s", jobs[2].Started, jobs[1].Finished)
	}
	// The artifact, through the REST API's 302 to storage.
	arts := restList(t, s, fmt.Sprintf("builds/%d/artifacts", n))
	if len(arts) != 1 || arts[0]["path"] != "out.txt" || arts[0]["state"] != "finished" {
		t.Fatalf("artifacts %v", arts)
	}
	req, _ := http.NewRequest("GET", arts[0]["download_url"].(string), nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound {
		t.Fatalf("download: %s, want 302", resp.Status)
	}
	got, err := http.Get(resp.Header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(got.Body)
	got.Body.Close()
	if strings.TrimSpace(string(body)) != "gpu-42" {
		t.Errorf("artifact content %q, want gpu-42", body)
	}
}

func restList(t *testing.T, s *Server, path string) []map[string]any {
	t.Helper()
	req, _ := http.NewRequest("GET", s.URL()+"v2/organizations/"+s.Org+"/pipelines/"+s.Pipeline+"/"+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestLiveRetryAndPriority: exit 75 is retried by retry.automatic (on
// whichever agent asks next), exit 3 is not; a higher priority job is
// dispatched first.
func TestLiveRetryAndPriority(t *testing.T) {
	s := newLive(t, `steps:
  - key: flaky
    command: 'if [ "$$BUILDKITE_RETRY_COUNT" = 0 ]; then exit 75; fi; echo ok'
    retry: {automatic: [{exit_status: 75, limit: 1}]}
  - key: fails
    command: exit 3
    retry: {automatic: [{exit_status: 75, limit: 2}]}
    priority: 5
`, Options{})
	n := createBuild(t, s, nil)
	startAgent(t, s, "a1", "default")
	b := waitBuild(t, s, n, time.Minute)
	if b["state"] != "failed" {
		t.Fatalf("build %v, want failed (one step exits 3)", b["state"])
	}
	jobs := s.Jobs(n)
	var got []string
	for _, j := range jobs {
		got = append(got, fmt.Sprintf("%s:%s:%d", j.Key, j.State, *j.Exit))
	}
	if strings.Join(got, " ") != "flaky:failed:75 flaky:passed:0 fails:failed:3" {
		t.Errorf("jobs %v", got)
	}
	// The priority-5 step ran before the flaky one's first attempt.
	if !jobs[2].Started.Before(jobs[0].Started) {
		t.Errorf("priority 5 started %s, after priority 0 at %s", jobs[2].Started, jobs[0].Started)
	}
}

// TestLiveCancelTimeoutAndLostAgent: a canceled build's running job goes
// canceling and the agent stops it, and is never retried, though a rule
// matches its signal reason; a step past timeout_in_minutes is timed out,
// and retried only because a rule names signal_reason cancel; an agent
// killed mid-job is lost and its job exits -1 with no signal reason, which
// the rule for a lost agent hands to another agent. The command ends on
// SIGTERM with exit 1 by its own trap, but the timeout can come before
// the shell has set the trap (the clock starts when the agent starts the
// job, checkout included: 3 s on a loaded CI machine), and then the exit
// status is -1, 143 or 255 depending on which process the signal reaches
// first. "*" matches 1 to 255 only (retry.md), so the cancel rule names
// every one of them: the test is about the signal reason, not the code.
func TestLiveCancelTimeoutAndLostAgent(t *testing.T) {
	s := newLive(t, `steps:
  - key: "${WHAT}"
    command: 'trap "exit 1" TERM; if [ "$$BUILDKITE_AGENT_NAME" = victim ] || [ "$$WHAT" != lost ]; then sleep 60 & wait; fi; echo done'
    timeout_in_minutes: 1
    retry:
      automatic:
        - {exit_status: -1, signal_reason: none, limit: 1}
        - {exit_status: [-1, 1, 143, 255], signal_reason: cancel, limit: 1}
`, Options{Minute: 3 * time.Second, LostAfter: 2 * time.Second})
	t.Run("cancel", func(t *testing.T) {
		startAgent(t, s, "c1", "default")
		n := createBuild(t, s, map[string]string{"WHAT": "cancel"})
		waitState(t, s, n, "running")
		rest(t, s, "PUT", fmt.Sprintf("builds/%d/cancel", n), nil)
		start := time.Now()
		b := waitBuild(t, s, n, 30*time.Second)
		if jobs := s.Jobs(n); b["state"] != "canceled" || len(jobs) != 1 || jobs[0].State != "canceled" || jobs[0].SignalReason != "cancel" {
			t.Fatalf("build %v, jobs %+v; want one job, canceled by signal reason cancel, not retried", b["state"], jobs)
		}
		t.Logf("canceled in %s", time.Since(start))
	})
	t.Run("timeout", func(t *testing.T) {
		startAgent(t, s, "t1", "default")
		n := createBuild(t, s, map[string]string{"WHAT": "timeout"})
		b := waitBuild(t, s, n, 30*time.Second)
		jobs := s.Jobs(n)
		if b["state"] != "failed" || len(jobs) != 2 {
			t.Fatalf("build %v, jobs %+v; want two timed-out attempts", b["state"], jobs)
		}
		for _, j := range jobs {
			if j.State != "timed_out" || j.SignalReason != "cancel" {
				t.Errorf("job %+v, want timed_out with signal reason cancel", j)
			}
		}
	})
	t.Run("lost", func(t *testing.T) {
		victim := startAgent(t, s, "victim", "default")
		n := createBuild(t, s, map[string]string{"WHAT": "lost"})
		waitState(t, s, n, "running")
		time.Sleep(time.Second) // the job is running, not just accepted
		_ = victim.cmd.Process.Kill()
		startAgent(t, s, "rescuer", "default")
		b := waitBuild(t, s, n, 30*time.Second)
		jobs := s.Jobs(n)
		if b["state"] != "passed" || len(jobs) != 2 {
			t.Fatalf("build %v, jobs %+v", b["state"], jobs)
		}
		if j := jobs[0]; j.Agent != "victim" || *j.Exit != -1 || j.SignalReason != "" || !j.Retried {
			t.Errorf("first attempt %+v, want exit -1 with no signal reason on victim, retried", j)
		}
		if j := jobs[1]; j.Agent != "rescuer" || j.State != "passed" {
			t.Errorf("retry %+v, want passed on rescuer", j)
		}
		// agents.md: the list holds connected (and stopping) agents only.
		req, _ := http.NewRequest("GET", s.URL()+"v2/organizations/"+s.Org+"/agents", nil)
		req.Header.Set("Authorization", "Bearer "+s.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var agents []map[string]any
		if err := json.NewDecoder(resp.Body).Decode(&agents); err != nil || len(agents) != 1 {
			t.Errorf("agents list: %v, %v; want the rescuer alone", agents, err)
		}
		for _, a := range agents {
			if a["name"] == "victim" || a["connection_state"] != "connected" {
				t.Errorf("agents list holds %v (%v); want connected agents only", a["name"], a["connection_state"])
			}
		}
	})
}

func waitState(t *testing.T, s *Server, n int, state string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		if rest(t, s, "GET", fmt.Sprintf("builds/%d", n), nil)["state"] == state {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("build %d never reached %s: %+v", n, state, s.Jobs(n))
}

// TestLiveSignedSteps: v3.52.1's own signing and verification through the
// stand-in. A control agent uploads with `pipeline upload --jwks-file-path`;
// the job's `step` carries the signature to a verifying agent
// (`--job-verification-jwks-path`). It runs a signed step without plugins,
// and refuses an unsigned one before it starts: -1 with signal_reason
// signature_rejected, which a `signal_reason: none` rule never retries.
// It also refuses a correctly signed step WITH plugins: v3.52.1 decodes the
// job's step with encoding/json, which drops every plugin, so the plugins
// it checks are not the ones that were signed (fixed in v3.53.0, agent
// commit 3b4630cdf "Fix verification for steps with plugins, part 2").
// Every kbgen eval step has a plugin, which is why nodes on v3.52.1 do not
// turn the agent's verification on and kbgen sandbox checks kbgen's own
// step signature instead. Uploading a key the build already has is
// refused (a retried upload).
func TestLiveSignedSteps(t *testing.T) {
	kp, err := signing.Generate("", "kbgen-test")
	if err != nil {
		t.Fatal(err)
	}
	keys := t.TempDir()
	priv, pub := filepath.Join(keys, "private.jwks"), filepath.Join(keys, "public.jwks")
	if err := os.WriteFile(priv, kp.Private, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pub, kp.Public, 0o644); err != nil {
		t.Fatal(err)
	}
	s := newLive(t, `steps:
  - key: upload-signed
    command: buildkite-agent pipeline upload signed.yml --jwks-file-path "$$SIGNING_KEY" --signing-key-id kbgen-test
    agents: {queue: control}
  - key: upload-unsigned
    command: buildkite-agent pipeline upload unsigned.yml
    agents: {queue: control}
  - key: upload-plugin
    command: buildkite-agent pipeline upload plugin.yml --jwks-file-path "$$SIGNING_KEY" --signing-key-id kbgen-test
    agents: {queue: control}
  - key: upload-again
    depends_on: upload-signed
    command: buildkite-agent pipeline upload signed.yml --jwks-file-path "$$SIGNING_KEY" --signing-key-id kbgen-test
    agents: {queue: control}
`, Options{},
		"signed.yml", "steps:\n  - key: signed\n    command: echo the signed step ran\n    env: {KBGEN_X: \"1\"}\n    agents: {queue: verify}\n",
		"plugin.yml", "steps:\n  - key: plugin\n    command: echo the plugin step ran\n    agents: {queue: verify}\n    plugins:\n      - ./no-such-plugin: {gpus: 1}\n",
		"unsigned.yml", "steps:\n  - key: unsigned\n    command: echo the unsigned step ran\n    agents: {queue: verify}\n    retry: {automatic: [{exit_status: -1, signal_reason: none, limit: 2}]}\n")
	startAgent(t, s, "control", "control")
	// Both behaviours must be named: v3.52.1 has no default for them.
	startAgent(t, s, "verifier", "verify", "--job-verification-jwks-path", pub,
		"--job-verification-no-signature-behavior", "block", "--job-verification-invalid-signature-behavior", "block")
	n := createBuild(t, s, map[string]string{"SIGNING_KEY": priv})
	waitBuild(t, s, n, time.Minute)
	byKey := map[string][]JobInfo{}
	for _, j := range s.Jobs(n) {
		byKey[j.Key] = append(byKey[j.Key], j)
	}
	if j := byKey["signed"]; len(j) != 1 || j[0].State != "passed" || !strings.Contains(j[0].Log, "the signed step ran") {
		t.Errorf("signed step %+v: want one job that passed", j)
	}
	if j := byKey["unsigned"]; len(j) != 1 || j[0].Exit == nil || *j[0].Exit != -1 || j[0].SignalReason != "signature_rejected" || strings.Contains(j[0].Log, "the unsigned step ran") {
		t.Errorf("unsigned step %+v: want one job refused before it ran, -1 signature_rejected, not retried", j)
	}
	if j := byKey["plugin"]; len(j) != 1 || j[0].SignalReason != "signature_rejected" || !strings.Contains(j[0].Log, "could not verify") {
		t.Errorf("signed step with a plugin %+v: want it refused by v3.52.1 (signature_rejected); if it now passes, the agent verifies plugin steps and nodes can turn verification on", j)
	}
	if j := byKey["upload-again"]; len(j) != 1 || j[0].State != "failed" || !strings.Contains(j[0].Log, "already been used") {
		t.Errorf("second upload of key signed %+v: want it refused as a duplicate key", j)
	}
}
