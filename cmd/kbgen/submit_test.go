package main

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/payload"
)

// fakeBK starts a fake Buildkite on a virtual clock and points kbgen's
// client at it; it returns the server and the env kbgen should run with.
func fakeBK(t *testing.T, sc fakebuildkite.Script) (*fakebuildkite.Server, map[string]string) {
	t.Helper()
	clock := client.NewFakeClock(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	fake := fakebuildkite.New(clock.Now)
	t.Cleanup(fake.Close)
	fake.SetScript(sc)
	clientHook = func(o *client.Options) {
		o.Clock = clock
		o.AttemptTimeout = 150 * time.Millisecond
	}
	t.Cleanup(func() { clientHook = nil })
	return fake, map[string]string{
		"BUILDKITE_API_TOKEN": fake.Token, "BUILDKITE_ORG": fake.Org,
		"BUILDKITE_PIPELINE": fake.Pipeline, "BUILDKITE_API_URL": fake.URL(),
	}
}

func jobFile(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "job.json")
	if err := os.WriteFile(p, []byte(`{"lang":"py","mode":"test","sources":{"eval.py":"","submission.py":""},"main":"eval.py","tests":[{"n":1}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func resultLine(t *testing.T, body string) string {
	t.Helper()
	res, err := client.ParseResult([]byte(body))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(res)
	return string(b) + "\n"
}

func failLine(msg string) string {
	b, _ := json.Marshal(payload.Failed(payload.SystemInfo{}, errors.New(msg)))
	return string(b) + "\n"
}

func TestSubmitCLIProgress(t *testing.T) {
	_, env := fakeBK(t, fakebuildkite.QuickScript)
	job := jobFile(t)
	r := runKbgen(t, env, "", "submit", "--queue", "nvidia-h100", "--payload-file", job, "--run-id", "r1")
	if r.code != 0 {
		t.Fatalf("exit %d\nstderr: %s", r.code, r.stderr)
	}
	if want := resultLine(t, fakebuildkite.DefaultResult); r.stdout != want {
		t.Errorf("stdout:\n got %q\nwant %q", r.stdout, want)
	}
	wantErr := "build 1: https://buildkite.com/gpu-mode/kernelbot/builds/1\n" +
		"scheduled 0.0s → running 1.0s → eval scheduled 2.0s → eval running 3.5s → passed 5.0s → eval passed 5.0s\n"
	if r.stderr != wantErr {
		t.Errorf("stderr:\n got %q\nwant %q", r.stderr, wantErr)
	}

	r = runKbgen(t, env, "", "submit", "--queue", "nvidia-h100", "-f", job, "--run-id", "r2", "--progress=json")
	wantJSON := `{"event":"created","build":2,"url":"https://buildkite.com/gpu-mode/kernelbot/builds/2","run_id":"r2","elapsed":0}
{"event":"state","build":2,"state":"scheduled","elapsed":0}
{"event":"state","build":2,"state":"running","elapsed":1}
{"event":"job","build":2,"step":"eval","state":"scheduled","elapsed":2}
{"event":"job","build":2,"step":"eval","state":"running","elapsed":3.5}
{"event":"state","build":2,"state":"passed","elapsed":5}
{"event":"job","build":2,"step":"eval","state":"passed","elapsed":5}
{"event":"done","build":2,"state":"passed","elapsed":5,"success":true,"exit_code":0}
`
	if r.code != 0 || r.stderr != wantJSON {
		t.Errorf("exit %d, --progress=json stderr:\n%s\nwant:\n%s", r.code, r.stderr, wantJSON)
	}

	stdinJob, _ := os.ReadFile(job)
	r = runKbgen(t, env, string(stdinJob), "submit", "--queue", "nvidia-h100", "-f", "-", "--quiet")
	if r.code != 0 || r.stderr != "" || r.stdout != resultLine(t, fakebuildkite.DefaultResult) {
		t.Errorf("--quiet: exit %d, stderr %q, stdout %q", r.code, r.stderr, r.stdout)
	}
}

// TestSubmitCLIOutcomes asserts the exact stdout and exit code of each
// way a submission can end.
func TestSubmitCLIOutcomes(t *testing.T) {
	q := fakebuildkite.QuickScript
	with := func(f func(*fakebuildkite.Script)) fakebuildkite.Script { s := q; f(&s); return s }
	ok := resultLine(t, fakebuildkite.DefaultResult)
	tests := []struct {
		name   string
		script fakebuildkite.Script
		faults []fakebuildkite.Fault
		args   []string
		code   int
		stdout string
	}{
		{name: "passes", script: q, code: 0, stdout: ok},
		{name: "500 then ok", script: q, faults: []fakebuildkite.Fault{{Method: "GET", Path: "/builds/1", Status: 500, Times: 2}}, code: 0, stdout: ok},
		{name: "502 on artifacts", script: q, faults: []fakebuildkite.Fault{{Method: "GET", Path: "/artifacts", Status: 502, Times: 2}}, code: 0, stdout: ok},
		{name: "503 on create", script: q, faults: []fakebuildkite.Fault{{Method: "POST", Path: "/builds", Status: 503}}, code: 0, stdout: ok},
		{name: "429 Retry-After", script: q, faults: []fakebuildkite.Fault{{Method: "GET", Path: "/builds/1", Status: 429, RetryAfter: "5", Times: 3}}, code: 0, stdout: ok},
		{name: "reset connections", script: q, faults: []fakebuildkite.Fault{{Method: "GET", Reset: true, Times: 3}}, code: 0, stdout: ok},
		{name: "slow response", script: q, faults: []fakebuildkite.Fault{{Method: "GET", Path: "/builds/1", Delay: 400 * time.Millisecond}}, code: 0, stdout: ok},
		{name: "no result.json", script: with(func(s *fakebuildkite.Script) { s.Artifacts = map[string][]byte{"out.txt": nil} }), code: 3,
			stdout: failLine("build 1 passed but the eval job uploaded no result.json")},
		{name: "truncated result.json", script: with(func(s *fakebuildkite.Script) {
			s.Artifacts = map[string][]byte{"result.json": []byte(`{"success": true, "runs": {`)}
		}), code: 3,
			stdout: failLine("build 1: result.json of the eval job is not a valid FullResult: not JSON (unexpected EOF)")},
		{name: "invalid result.json", script: with(func(s *fakebuildkite.Script) { s.Artifacts = map[string][]byte{"result.json": []byte(`["success"]`)} }), code: 3,
			stdout: failLine("build 1: result.json of the eval job is not a valid FullResult: not JSON (json: cannot unmarshal array into Go value of type map[string]json.RawMessage)")},
		{name: "canceled build", script: with(func(s *fakebuildkite.Script) { s.CancelAt = 3 * time.Second }), code: 3,
			stdout: failLine("build 1 was canceled: the eval job canceled without uploading result.json")},
		{name: "job never started", script: with(func(s *fakebuildkite.Script) { s.EvalNeverStarts = true; s.Finish = 20 * time.Second }), code: 3,
			stdout: failLine(`build 1 failed: the eval job never started (state expired): no agent on queue "nvidia-h100" took it; no result.json`)},
		{name: "API down", script: q, faults: []fakebuildkite.Fault{{Method: "GET", Path: "/builds/1", Status: 503, Times: 1000}}, code: 4,
			stdout: failLine("getting build 1: GET /v2/organizations/gpu-mode/pipelines/kernelbot/builds/1: 503 Service Unavailable: Service Unavailable; the build may still be running: `kbgen wait 1` re-attaches")},
		{name: "timeout", script: with(func(s *fakebuildkite.Script) { s.Never = true }), args: []string{"--timeout", "45s"}, code: 5,
			stdout: failLine("timed out after 45s waiting for build 1 (state running); the build was canceled")},
		// Buildkite refusing every create: exit 5 at the --timeout, not 4
		// after the create's 137 s of retries (issue 18).
		{name: "timeout while the create fails", script: q, faults: []fakebuildkite.Fault{{Path: "/builds", Status: 503, Times: 1000}}, args: []string{"--timeout", "20s"}, code: 5,
			stdout: failLine("timed out after 20s before run r1 was created (creating build: POST /v2/organizations/gpu-mode/pipelines/kernelbot/builds: 503 Service Unavailable: Service Unavailable); whether a build was made is unknown (looking up run r1: GET /v2/organizations/gpu-mode/pipelines/kernelbot/builds: server error 503 (stopped retrying: timed out)): look for meta-data run_id=r1")},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fake, env := fakeBK(t, tt.script)
			for _, f := range tt.faults {
				fake.AddFault(f)
			}
			args := append([]string{"submit", "--queue", "nvidia-h100", "-f", jobFile(t), "--run-id", "r1", "-q"}, tt.args...)
			r := runKbgen(t, env, "", args...)
			if r.code != tt.code {
				t.Errorf("exit %d, want %d; stderr: %s", r.code, tt.code, r.stderr)
			}
			if r.stdout != tt.stdout {
				t.Errorf("stdout:\n got %s\nwant %s", r.stdout, tt.stdout)
			}
		})
	}
}

func TestSubmitCLITask(t *testing.T) {
	fake, env := fakeBK(t, fakebuildkite.QuickScript)
	r := runKbgen(t, env, "", "submit", "--queue", "h100", "--task", "../../task/testdata/py", "--submission", "../../task/testdata/submission.py", "--mode", "benchmark", "-q", "--run-id", "t1", "--user", "u7")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	env1, meta, msg := fake.CreatedEnv(1)
	cfg, err := payload.Decode(env1[contract.EnvPayload])
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Mode != payload.ModeBenchmark || cfg.Sources["submission.py"] != "def custom_kernel(x):\n    return x\n" {
		t.Errorf("job built from the task: mode %s, submission %q", cfg.Mode, cfg.Sources["submission.py"])
	}
	if env1[contract.EnvUser] != "u7" || meta["run_id"] != "t1" || meta["queue"] != "nvidia-h100" || env1[contract.EnvQueue] != "nvidia-h100" || msg != "kbgen t1: benchmark on nvidia-h100" {
		t.Errorf("env %v meta %v message %q", env1, meta, msg)
	}
}

// TestSubmitBootstrapQueue: the flag, else KBGEN_BOOTSTRAP_QUEUE, becomes
// KERNELBOT_BOOTSTRAP_QUEUE on the build; without either it is not set, and
// the bootstrap runs on the job's queue.
func TestSubmitBootstrapQueue(t *testing.T) {
	for _, tt := range []struct {
		flag, env, want string
	}{{"", "", ""}, {"control", "", "control"}, {"", "kernelbot-control", "kernelbot-control"}, {"flag-wins", "env", "flag-wins"}} {
		fake, env := fakeBK(t, fakebuildkite.QuickScript)
		if tt.env != "" {
			env["KBGEN_BOOTSTRAP_QUEUE"] = tt.env
		}
		args := []string{"submit", "--queue", "h100", "-f", jobFile(t), "-q", "--run-id", "b1"}
		if tt.flag != "" {
			args = append(args, "--bootstrap-queue", tt.flag)
		}
		if r := runKbgen(t, env, "", args...); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		env1, _, _ := fake.CreatedEnv(1)
		got, set := env1[contract.EnvBootstrapQueue]
		if got != tt.want || set != (tt.want != "") {
			t.Errorf("flag %q env %q: KERNELBOT_BOOTSTRAP_QUEUE=%q (set %v), want %q", tt.flag, tt.env, got, set, tt.want)
		}
	}
}

// TestSubmitBranchAndCommit: the build is created at the ref asked for
// (default main at HEAD), which is what the bootstrap step checks out.
func TestSubmitBranchAndCommit(t *testing.T) {
	for _, tt := range []struct {
		args                []string
		wantBranch, wantRef string
	}{
		{nil, "main", "HEAD"},
		{[]string{"--branch", "release", "--commit", "0123abcd"}, "release", "0123abcd"},
	} {
		fake, env := fakeBK(t, fakebuildkite.QuickScript)
		args := append([]string{"submit", "--queue", "h100", "-f", jobFile(t), "-q", "--run-id", "ref1"}, tt.args...)
		if r := runKbgen(t, env, "", args...); r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		if b, c := fake.CreatedRef(1); b != tt.wantBranch || c != tt.wantRef {
			t.Errorf("%v: build at %s/%s, want %s/%s", tt.args, b, c, tt.wantBranch, tt.wantRef)
		}
	}
}

func TestWaitAndResultCLI(t *testing.T) {
	fake, env := fakeBK(t, fakebuildkite.QuickScript)
	n := fake.Seed("left-behind", "nvidia-h100", fakebuildkite.QuickScript, 0)
	ok := resultLine(t, fakebuildkite.DefaultResult)
	r := runKbgen(t, env, "", "result", "1")
	if r.code != 5 || r.stdout != failLine("build 1 has not finished (state scheduled); `kbgen wait 1` waits for it") {
		t.Errorf("result of a running build: exit %d stdout %s", r.code, r.stdout)
	}
	r = runKbgen(t, env, "", "wait", "1")
	if r.code != 0 || r.stdout != ok || !strings.HasSuffix(r.stderr, "passed 5.0s → eval passed 5.0s\n") {
		t.Errorf("wait %d: exit %d stdout %s stderr %s", n, r.code, r.stdout, r.stderr)
	}
	r = runKbgen(t, env, "", "result", "1")
	if r.code != 0 || r.stdout != ok || r.stderr != "" {
		t.Errorf("result: exit %d stdout %s stderr %s", r.code, r.stdout, r.stderr)
	}
	r = runKbgen(t, env, "", "result", "7")
	if r.code != 4 || !strings.Contains(r.stdout, `404 Not Found: No build found`) {
		t.Errorf("result of a missing build: exit %d stdout %s", r.code, r.stdout)
	}
}

func TestQueuesCLI(t *testing.T) {
	fake, env := fakeBK(t, fakebuildkite.QuickScript)
	fake.SetAgents([]fakebuildkite.AgentSpec{
		{Name: "n1-gpu0", Version: "3.50.0", Queue: "nvidia-h100", BusyWith: "eval"},
		{Name: "n1-gpu1", Version: "3.50.0", Queue: "nvidia-h100"},
		{Name: "mi-0", Version: "3.49.1", Queue: "mi300", Paused: true},
	})
	fake.Seed("a", "nvidia-h100", fakebuildkite.QuickScript, 0)
	r := runKbgen(t, env, "", "queues")
	want := `QUEUE        AGENTS  IDLE  BUSY  WAITING  VERSIONS  AGENT NAMES
mi300        1       0     0     0        3.49.1    mi-0 (paused)
nvidia-h100  2       1     1     1        3.50.0    n1-gpu0*, n1-gpu1
(* busy; WAITING: builds submitted to the queue that no agent runs yet)
`
	if r.code != 0 || r.stdout != want {
		t.Errorf("exit %d, table:\n%s\nwant:\n%s", r.code, r.stdout, want)
	}
	r = runKbgen(t, env, "", "queues", "nvidia-h100", "--json")
	var qs []client.QueueStatus
	if err := json.Unmarshal([]byte(r.stdout), &qs); err != nil || len(qs) != 1 || qs[0].Waiting != 1 || qs[0].Busy != 1 || qs[0].Idle != 1 {
		t.Errorf("--json: %v %+v\n%s", err, qs, r.stdout)
	}
	env["BUILDKITE_API_TOKEN"] = "nope"
	r = runKbgen(t, env, "", "queues")
	if r.code != 4 || r.stderr != "kbgen: listing agents: GET /v2/organizations/gpu-mode/agents: 401 Unauthorized: Authentication required. Please supply a valid API Access Token.\n" {
		t.Errorf("bad token: exit %d stderr %q", r.code, r.stderr)
	}
}

// TestSubmitCLINeverLeaksToken runs with --debug through faults and checks
// every byte kbgen wrote and every request the storage host saw.
func TestSubmitCLINeverLeaksToken(t *testing.T) {
	fake, env := fakeBK(t, fakebuildkite.QuickScript)
	fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 502, Times: 2})
	fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "/download", Reset: true})
	r := runKbgen(t, env, "", "submit", "--queue", "nvidia-h100", "-f", jobFile(t), "--debug", "--progress=json")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stderr, "debug: api GET ") || !strings.Contains(r.stderr, "debug: storage GET ") {
		t.Fatalf("--debug logged no requests:\n%s", r.stderr)
	}
	if strings.Contains(r.stdout+r.stderr, fake.Token) {
		t.Errorf("token in output:\n%s\n%s", r.stdout, r.stderr)
	}
	for _, req := range fake.Requests() {
		if req.Server == "storage" {
			b, _ := json.Marshal(req)
			if strings.Contains(string(b), fake.Token) || len(req.Header.Values("Authorization")) > 0 {
				t.Errorf("storage request carries credentials: %s", b)
			}
		}
	}
	// A token file works the same and is not echoed either.
	tf := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tf, []byte(fake.Token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	delete(env, "BUILDKITE_API_TOKEN")
	r = runKbgen(t, env, "", "submit", "--queue", "nvidia-h100", "-f", jobFile(t), "--token-file", tf, "--debug")
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, fake.Token) {
		t.Errorf("--token-file: exit %d, output:\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestSubmitCLICredentials(t *testing.T) {
	job := jobFile(t)
	full := map[string]string{"BUILDKITE_API_TOKEN": "t", "BUILDKITE_ORG": "o", "BUILDKITE_PIPELINE": "p", "BUILDKITE_API_URL": "http://127.0.0.1:1/"}
	without := func(k string) map[string]string {
		m := map[string]string{}
		for kk, v := range full {
			if kk != k {
				m[kk] = v
			}
		}
		return m
	}
	for _, tt := range []struct {
		env  map[string]string
		args []string
		want string
	}{
		{without("BUILDKITE_API_TOKEN"), nil, "kbgen: no Buildkite API token: set BUILDKITE_API_TOKEN or pass --token-file\n"},
		{without("BUILDKITE_ORG"), nil, "kbgen: no Buildkite organization: pass --org or set BUILDKITE_ORG\n"},
		{without("BUILDKITE_PIPELINE"), nil, "kbgen: no Buildkite pipeline: pass --pipeline or set BUILDKITE_PIPELINE\n"},
	} {
		r := runKbgen(t, tt.env, "", append([]string{"submit", "--queue", "h100", "-f", job}, tt.args...)...)
		if r.code != 2 || r.stderr != tt.want || r.stdout != "" {
			t.Errorf("env %v: exit %d, stderr %q, stdout %q; want 2, %q", tt.env, r.code, r.stderr, r.stdout, tt.want)
		}
	}
}

// TestSubmitCLISigterm sends the test process a real SIGTERM while submit
// waits on a build that never ends: the build must be canceled and the
// outcome reported with exit 5.
func TestSubmitCLISigterm(t *testing.T) {
	sc := fakebuildkite.QuickScript
	sc.Never = true
	fake, env := fakeBK(t, sc)
	go func() {
		// signalContext is listening once the create request is made.
		for fake.CountRequests("POST", "/builds") == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(20 * time.Millisecond)
		_ = syscall.Kill(os.Getpid(), syscall.SIGTERM)
	}()
	r := runKbgen(t, env, "", "submit", "--queue", "nvidia-h100", "-f", jobFile(t), "--timeout", "0", "--run-id", "s1")
	if r.code != 5 {
		t.Fatalf("exit %d, want 5; stderr %s", r.code, r.stderr)
	}
	if !strings.HasPrefix(r.stdout, `{"success":false,"error":"interrupted (received terminated) waiting for build 1 (state running); the build was canceled"`) {
		t.Errorf("stdout: %s", r.stdout)
	}
	if !strings.Contains(r.stderr, "build 1 canceled\n") {
		t.Errorf("stderr: %s", r.stderr)
	}
	if n := fake.CountRequests("PUT", "/builds/1/cancel"); n != 1 {
		t.Errorf("%d cancel requests, want 1", n)
	}
}
