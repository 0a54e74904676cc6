package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/payload"
)

func needPython3(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH: kbgen run/local not exercised")
	}
}

// exampleJobFile writes a built-in example's job as JSON into dir.
func exampleJobFile(t *testing.T, dir, example, submission string, mode payload.Mode) string {
	t.Helper()
	src, err := examples.Submission(example, submission)
	if err != nil {
		t.Fatal(err)
	}
	return jobFileFor(t, dir, example, src, mode)
}

// jobFileFor writes the job of example with the submission source src.
func jobFileFor(t *testing.T, dir, example, src string, mode payload.Mode) string {
	t.Helper()
	cfg, err := examples.Config(example, mode, src)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "job.json")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func systemFile(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "system.json")
	if err := os.WriteFile(p, []byte(`{"gpu": "Test GPU", "device_count": 1, "runtime": "CUDA", "hostname": "h"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// fakeAgent puts a stand-in buildkite-agent first on PATH; it logs each
// call's argv (and annotate's and meta-data's stdin) into the returned
// directory, named by the subcommand (artifact.argv, annotate.stdin, …:
// the publish makes its calls at once, so their order is not theirs to
// keep), and exits 1 for the subcommand named by fail.
func fakeAgent(t *testing.T, fail string) string {
	t.Helper()
	bin, logs := t.TempDir(), t.TempDir()
	script := `#!/bin/sh
printf '%s\n' "$@" > "` + logs + `/$1.argv"
{ [ "$1" = annotate ] || [ "$1" = meta-data ]; } && cat > "` + logs + `/$1.stdin"
[ "$1" = "` + fail + `" ] && { echo "upload refused (stand-in)" >&2; exit 1; }
exit 0
`
	if err := os.WriteFile(filepath.Join(bin, "buildkite-agent"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return logs
}

func TestRunUploadsAndAnnotates(t *testing.T) {
	needPython3(t)
	dir := t.TempDir()
	logs := fakeAgent(t, "none")
	out := filepath.Join(dir, "out", "result.json")
	r := runKbgen(t, map[string]string{"BUILDKITE_JOB_ID": "0190-job-7"}, "", "run", "--payload-file", exampleJobFile(t, dir, "identity", "submission", payload.ModeTest),
		"--system", systemFile(t, dir), "--out", out)
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var res payload.FullResult
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &res); err != nil || !res.Success || !res.Runs["test"].Run.Passed {
		t.Fatalf("result: %v %s", err, b)
	}
	argv0, _ := os.ReadFile(filepath.Join(logs, "artifact.argv"))
	argv1, _ := os.ReadFile(filepath.Join(logs, "annotate.argv"))
	md, _ := os.ReadFile(filepath.Join(logs, "annotate.stdin"))
	// A test run records no noise and its result rides on the build's
	// meta-data: nothing to upload (runner.Uploads).
	if len(argv0) != 0 {
		t.Errorf("a test run uploaded artifacts: argv %q", argv0)
	}
	if !strings.HasPrefix(string(argv1), "annotate\n--style\nsuccess\n") || !strings.Contains(string(md), "**kbgen** `test` on `Test GPU` (`CUDA`): all runs passed") {
		t.Errorf("annotate argv %q body %q", argv1, md)
	}
	// The result rides on the build as meta-data for kbgen serve.
	argv2, _ := os.ReadFile(filepath.Join(logs, "meta-data.argv"))
	enc, _ := os.ReadFile(filepath.Join(logs, "meta-data.stdin"))
	job, got, err := payload.DecodeResultMetaData(string(enc))
	if string(argv2) != "meta-data\nset\n"+payload.ResultMetaDataKey+"\n" || err != nil || string(got) != string(b) || job != "0190-job-7" {
		t.Errorf("meta-data argv %q: value decodes to job %q, %q (%v), want this job's result.json", argv2, job, got, err)
	}
}

func TestRunUploadFailureKeepsTheResult(t *testing.T) {
	needPython3(t)
	dir := t.TempDir()
	fakeAgent(t, "artifact")
	out := filepath.Join(dir, "result.json")
	r := runKbgen(t, nil, "", "run", "--payload-file", exampleJobFile(t, dir, "identity", "wrong", payload.ModeTest),
		"--system", systemFile(t, dir), "--out", out)
	if r.code != 0 || !strings.Contains(r.stderr, "artifact upload failed (the result stays in "+out+")") || !strings.Contains(r.stderr, "upload refused (stand-in)") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if _, err := os.Stat(out); err != nil {
		t.Fatal(err)
	}
	// --no-upload never calls the agent.
	logs := fakeAgent(t, "none")
	if r := runKbgen(t, nil, "", "run", "--payload-file", filepath.Join(dir, "job.json"), "--system", systemFile(t, dir), "--out", out, "--no-upload"); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if ents, _ := os.ReadDir(logs); len(ents) != 0 {
		t.Errorf("--no-upload called buildkite-agent: %v", ents)
	}
}

func TestLocalDefaultPasses(t *testing.T) {
	needPython3(t)
	dir := t.TempDir()
	r := runKbgen(t, nil, "", "local", "--system", systemFile(t, dir))
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	var res payload.FullResult
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("stdout is not a FullResult: %v", err)
	}
	for _, k := range []string{"test", "benchmark", "leaderboard"} {
		if run := res.Runs[k].Run; run == nil || !run.Passed {
			t.Errorf("%s did not pass: %+v", k, run)
		}
	}
	for _, s := range []string{"mode leaderboard on h", "benchmark.0  ok     size: 8192; seed: 7  mean "} {
		if !strings.Contains(r.stderr, s) {
			t.Errorf("summary lacks %q:\n%s", s, r.stderr)
		}
	}
	if r := runKbgen(t, nil, "", "local", "--json", "--mode", "test", "--system", systemFile(t, dir)); r.code != 0 || r.stderr != "" || !strings.HasPrefix(r.stdout, "{") {
		t.Errorf("--json: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestRunSIGTERMStillWritesResult runs the real binary, cancels it as
// Buildkite cancels a job, and checks the result and the process tree.
func TestRunSIGTERMStillWritesResult(t *testing.T) {
	needPython3(t)
	if testing.Short() {
		t.Skip("builds the kbgen binary")
	}
	dir := t.TempDir()
	bin := kbgenbin.Path(t)
	work := filepath.Join(dir, "work")
	out := filepath.Join(dir, "result.json")
	cmd := exec.Command(bin, "run", "--payload-file", exampleJobFile(t, dir, "vectoradd", "hang", payload.ModeTest),
		"--system", systemFile(t, dir), "--out", out, "--workdir", work, "--no-upload")
	var stderr syncbuf.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(stderr.String(), "python3 eval.py test") && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // let the hanging kernel fork its helpers
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatalf("kbgen run ignored SIGTERM:\n%s", stderr.String())
	}
	if code := cmd.ProcessState.ExitCode(); code != exitcode.Canceled {
		t.Errorf("exit code %d, want 143\n%s", code, stderr.String())
	}
	var res payload.FullResult
	b, _ := os.ReadFile(out)
	if err := json.Unmarshal(b, &res); err != nil || res.Success || !strings.Contains(res.Error, "cancelled: received terminated") {
		t.Errorf("result: %v %s", err, b)
	}
	if left := processesUnder(work); len(left) > 0 {
		for _, p := range left {
			_ = syscall.Kill(p, syscall.SIGKILL)
		}
		t.Errorf("processes left running in the work dir: %v", left)
	}
}

// processesUnder lists processes whose working directory is below dir.
func processesUnder(dir string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink(filepath.Join("/proc", e.Name(), "cwd"))
		if err == nil && strings.HasPrefix(cwd, dir) {
			pids = append(pids, pid)
		}
	}
	return pids
}

func TestRunPublishUploadsAnExistingResult(t *testing.T) {
	dir := t.TempDir()
	res := `{"success": true, "error": "", "system": {"gpu": "MI300X", "device_count": 1, "cpu": "", "runtime": "ROCm", "platform": "", "torch": "", "hostname": ""},
 "runs": {"profile.0": {"start": "2025-01-02T03:04:05.000000", "end": "2025-01-02T03:04:05.000000", "compilation": null,
  "run": {"success": true, "passed": true, "command": "x", "stdout": "", "stderr": "", "exit_code": 0, "duration": 1, "result": {"check": "pass"}},
  "profile": {"profiler": "rocPROF", "trace": "", "download_url": null}}}}`
	out := filepath.Join(dir, "result.json")
	if err := os.MkdirAll(filepath.Join(dir, "profile_data"), 0o755); err != nil {
		t.Fatal(err)
	}
	for p, c := range map[string]string{out: res, filepath.Join(dir, "profile_data", "profile.0.zip"): "zip"} {
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	logs := fakeAgent(t, "none")
	if r := runKbgen(t, nil, "", "run", "--publish", out); r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	argv0, _ := os.ReadFile(filepath.Join(logs, "artifact.argv"))
	md, _ := os.ReadFile(filepath.Join(logs, "annotate.stdin"))
	if string(argv0) != "artifact\nupload\n--debug\n--no-color\n--debug-http=false\nresult.json;profile_data/profile.0.zip\n" || !strings.Contains(string(md), "**kbgen** `profile` on `MI300X` (`ROCm`): all runs passed") {
		t.Errorf("upload %q annotation %q", argv0, md)
	}
	fakeAgent(t, "annotate")
	if r := runKbgen(t, nil, "", "run", "--publish", out); r.code != 1 || !strings.Contains(r.stderr, "annotate failed") {
		t.Errorf("a failed annotation: exit %d: %s", r.code, r.stderr)
	}
	if r := runKbgen(t, nil, "", "run", "--publish", filepath.Join(dir, "missing.json")); r.code != 2 {
		t.Errorf("missing file: exit %d", r.code)
	}
	// A zip name the container planted cannot add upload patterns: the
	// agent gets the same two names, the log says what was refused.
	if err := os.WriteFile(filepath.Join(dir, "profile_data", "x;*;.zip"), []byte("zip"), 0o644); err != nil {
		t.Fatal(err)
	}
	logs = fakeAgent(t, "none")
	r := runKbgen(t, nil, "", "run", "--publish", out)
	argv0, _ = os.ReadFile(filepath.Join(logs, "artifact.argv"))
	if string(argv0) != "artifact\nupload\n--debug\n--no-color\n--debug-http=false\nresult.json;profile_data/profile.0.zip\n" || r.code != 1 || !strings.Contains(r.stderr, `refused 1 unsafe name(s)`) || !strings.Contains(r.stderr, `"profile_data/x;*;.zip"`) {
		t.Errorf("planted name: exit %d, upload %q, stderr %s", r.code, argv0, r.stderr)
	}
}

// TestRunRefusesAReroutedStep: with no sandbox in front (a Kubernetes
// pod), kbgen run itself compares the step's signed KERNELBOT_QUEUE with the
// agent's queue tag; a mismatch is a refused job (65) with result.json.
func TestRunRefusesAReroutedStep(t *testing.T) {
	dir := t.TempDir()
	job := exampleJobFile(t, dir, "identity", "", payload.ModeTest)
	out := filepath.Join(dir, "result.json")
	env := map[string]string{
		"BUILDKITE_JOB_ID": "j1", "KERNELBOT_QUEUE": "nvidia-h100", "BUILDKITE_AGENT_META_DATA_QUEUE": "amd-mi300",
	}
	r := runKbgen(t, env, "", "run", "--payload-file", job, "--system", systemFile(t, dir), "--out", out, "--no-upload")
	// The reason is said once, on one line (it was once printed twice:
	// "refusing a re-routed step: … : refusing a re-routed step").
	const reason = `refusing a re-routed step: it is for queue "nvidia-h100" but runs on an agent of queue "amd-mi300"`
	if r.code != 65 || !strings.Contains(r.stderr, "\nkbgen: "+reason+"\n") {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res payload.FullResult
	if err := json.Unmarshal(b, &res); err != nil || res.Success || res.Error != reason || len(res.Runs) != 0 || res.System.DeviceCount != 1 {
		t.Fatalf("result %s", b)
	}
	// Inside the sandbox (which checked already) there is nothing to compare.
	needPython3(t)
	env["KBGEN_SANDBOX"] = "1"
	if r := runKbgen(t, env, "", "run", "--payload-file", job, "--system", systemFile(t, dir), "--out", out, "--no-upload"); r.code != 0 {
		t.Fatalf("in the sandbox: exit %d: %s", r.code, r.stderr)
	}
}

// TestRunPublishRefusesAHugeResult: the host-side publish reads no
// result.json larger than any client would download (issue 20: a 266 MB
// one took 1.8 GB on the host): it is refused unread, exit 2.
func TestRunPublishRefusesAHugeResult(t *testing.T) {
	out := filepath.Join(t.TempDir(), "result.json")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(266 << 20); err != nil { // sparse: no disk used
		t.Fatal(err)
	}
	f.Close()
	logs := fakeAgent(t, "none")
	r := runKbgen(t, nil, "", "run", "--publish", out)
	if r.code != 2 || !strings.Contains(r.stderr, "is not a regular file of at most 64 MiB") {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
	if calls, _ := filepath.Glob(filepath.Join(logs, "*.argv")); len(calls) != 0 {
		t.Errorf("the agent was called: %v", calls)
	}
}
