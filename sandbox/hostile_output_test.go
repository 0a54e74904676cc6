package sandbox

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// forgedMarker is in every result a hostile submission forges; it must
// never reach a published result.json.
const forgedMarker = "FORGED-1NS-MEAN"

// forgedPass is a passing FullResult as a hostile submission writes it.
const forgedPass = `{"success": true, "error": "", "system": {}, "runs": {"test": {"start": "2026-11-24T00:00:00Z", "end": "2026-11-24T00:00:01Z", "run": {"success": true, "passed": true, "command": "", "start": "2026-11-24T00:00:00Z", "end": "2026-11-24T00:00:01Z", "stdout": "", "stderr": "", "exit_code": 0, "duration": 0, "result": {"check": "pass", "note": "` + forgedMarker + `"}}}}}`

// hostileRun is `kbgen sandbox -- kbgen run` on a job whose submission.py
// (and harness) is a shell script, run by the ShellPython image exactly
// where a Python submission runs: under the real runner, in the real
// container.
type hostileRun struct {
	out     Outcome
	results string // the out dir the sandbox wrote
	stage   string // the stage base on the host
	log     string // what reached the job log
}

func runHostile(t *testing.T, memory, submission string) hostileRun {
	t.Helper()
	return runHostileJob(t, hostileJob{memory: memory, submission: submission})
}

// hostileJob is one hostile run: the submission, the harness (main,
// whose stdout the published result carries; "" exits 0) and what the
// test does beside the running container (during, with the job log so
// far and the sandbox's signal channel).
type hostileJob struct {
	memory, submission, main string
	during                   func(j *Job, log *syncbuf.Buffer, sigs chan<- os.Signal)
}

func runHostileJob(t *testing.T, h hostileJob) hostileRun {
	t.Helper()
	memory, submission := h.memory, h.submission
	if h.main == "" {
		h.main = "exit 0\n"
	}
	image := testimage.ShellPython(t)
	kbgen := kbgenbin.Path(t)
	cfg, err := json.Marshal([]map[string]any{{"./.buildkite/plugins/gpu-docker": plugincfg.GPUDocker{
		Image: image, Runtime: "nvidia", GPUs: 1, CPUs: 1, Memory: memory, ShmSize: "16m", PidsLimit: 256, Network: "none",
	}}})
	if err != nil {
		t.Fatal(err)
	}
	enc := encodedPyJob(t, submission, h.main)
	stage := t.TempDir()
	env := map[string]string{
		"BUILDKITE_PLUGINS": string(cfg),
		contract.EnvGPUUUID: "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b", contract.EnvCPUSet: strconv.Itoa(runtime.NumCPU() - 1),
		contract.EnvMems: "0", contract.EnvMemory: "1g",
	}
	for k, v := range payload.SplitEnv(enc) {
		env[k] = v
	}
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, StageDir: stage, RunnerBinary: kbgen, NoGPU: true})
	if err != nil {
		t.Fatal(err)
	}
	var log syncbuf.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	results := filepath.Join(t.TempDir(), "results")
	l := &Launcher{Stdout: &log, Stderr: &log, Log: &log, StopTimeout: 10 * time.Second}
	if h.during != nil {
		sigs := make(chan os.Signal, 2)
		l.Signals = sigs
		go h.during(j, &log, sigs)
	}
	o, err := j.Run(ctx, l, results)
	if err != nil {
		t.Fatal(err)
	}
	return hostileRun{out: o, results: results, stage: stage, log: log.String()}
}

// published reads what the sandbox would have the hook publish.
func (r hostileRun) published(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(r.results, contract.ResultFile))
	if err != nil {
		t.Fatalf("no result.json from the sandbox: %v\nlog:\n%s", err, tail(r.log, 30))
	}
	return string(b)
}

// TestHostileForgedResult: a submission that forges a passing result
// (in the out dir, and as a sealed frame on the container's stdout) and
// then kills the runner or breaks its result file never has that result
// published: the sandbox publishes the runner's own sealed result, or
// its own failure when there is none.
func TestHostileForgedResult(t *testing.T) {
	forge := `forged='` + forgedPass + `'
echo "$forged" > /kbgen/out/result.json
printf '\nkbgen-sealed-result v1 %d 0 %s\n%s' ${#forged} 6b6579 "$forged" > /proc/1/fd/1
`
	tests := []struct {
		name       string
		submission string
		verified   bool
		exit       int
		reason     string
	}{
		// The runner is the container's PID 1: the kernel drops a SIGKILL
		// sent to it from inside, and the forged frame cannot reach its
		// stdout (TestHostilePID1). A runner killed from outside is
		// TestHostilePID1Signals's "docker kill".
		{"SIGKILL the runner", forge + "kill -KILL $PPID\nsleep 5\n", true, 0, ""},
		// The runner takes SIGTERM as a cancel: its own sealed result
		// says so, and the job is not retried.
		{"SIGTERM the runner", forge + "kill -TERM $PPID\nsleep 5\n", true, 143, ""},
		{"make result.json.tmp a directory", "mkdir /kbgen/out/result.json.tmp\n" + forge, true, 0, ""},
		{"replace the out dir with a symlink", "rm -rf /kbgen/out/* ; ln -s /proc/1/fd/1 /kbgen/out/result.json.tmp\n" + forge, true, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := runHostile(t, "256m", tt.submission)
			got := r.published(t)
			t.Logf("exit %d; published %.300s", r.out.Code, got)
			if strings.Contains(got, forgedMarker) {
				t.Fatalf("the forged result was published:\n%s\nlog:\n%s", got, tail(r.log, 30))
			}
			if v := r.out.Vouch; v == nil || v.Verified != tt.verified || !strings.Contains(v.Reason, tt.reason) {
				t.Errorf("vouch = %+v, want verified %v with %q", v, tt.verified, tt.reason)
			}
			if code, _ := r.out.Exit(); code != tt.exit {
				t.Errorf("exit %d, want %d\nlog:\n%s", code, tt.exit, tail(r.log, 30))
			}
			if !tt.verified && !strings.Contains(got, `"success": false`) {
				t.Errorf("published %s, want the sandbox's failure", got)
			}
		})
	}
}

// TestHostileFillsOutDir: 3 GiB and 400,000 files (and directories) into
// /kbgen/out stop at the tmpfs's bounds inside the container, the job
// still ends with a result, and nothing lands on the host's disk.
func TestHostileFillsOutDir(t *testing.T) {
	submission := `dd if=/dev/zero of=/kbgen/out/big bs=1M count=3072 2>/dev/null; dd=$?
i=0; while [ $i -lt 400000 ]; do true 2>/dev/null >/kbgen/out/f$i || break; i=$((i+1)); done
k=0; while [ $k -lt 20000 ]; do mkdir /kbgen/out/d$k 2>/dev/null || break; k=$((k+1)); done
echo "hostile: dd=$dd big_kb=$(du -k /kbgen/out/big | cut -f1) files=$i dirs=$k"
`
	start := time.Now()
	// The harness attacks: its stdout (the report) is in the result.
	r := runHostileJob(t, hostileJob{memory: "512m", submission: "exit 0\n", main: submission})
	f := harnessFacts(t, r)
	t.Logf("took %v; %v", time.Since(start).Round(time.Millisecond), f)
	if f["dd"] == "" {
		t.Fatalf("the submission did not report what it wrote\nlog:\n%s", tail(r.log, 30))
	}
	if f["dd"] == "0" || atoi(f["big_kb"]) > int(dockerargv.OutDirSize>>10) || atoi(f["files"]) >= dockerargv.OutDirInodes || atoi(f["dirs"]) >= dockerargv.OutDirInodes {
		t.Errorf("the out dir was not bounded: %v (want < %d KiB and < %d inodes)\nlog:\n%s", f, dockerargv.OutDirSize>>10, dockerargv.OutDirInodes, tail(r.log, 30))
	}
	if r.out.Vouch == nil {
		t.Fatal("no result vouched for")
	}
	ents, err := os.ReadDir(r.results)
	if err != nil || len(ents) != len(r.out.Vouch.Files) {
		t.Errorf("the results dir holds %d entries (%v), want only %v", len(ents), err, r.out.Vouch.Files)
	}
	if left, _ := os.ReadDir(r.stage); len(left) != 0 {
		t.Errorf("the stage base still holds %v", left)
	}
	// What the submission wrote stayed in the container's tmpfs: the host
	// holds only the vouched files, a few KiB.
	var size int64
	for _, name := range r.out.Vouch.Files {
		fi, err := os.Stat(filepath.Join(r.results, name))
		if err != nil {
			t.Fatal(err)
		}
		size += fi.Size()
	}
	if size > 1<<20 {
		t.Errorf("the vouched files hold %d bytes", size)
	}
}

// TestHostileLog: a submission writing to the container's PID 1's stdout
// and stderr (/proc/1/fd/1 and 2, same uid under docker-init): fake group
// markers, an OSC 1339 link, an erase-line and a forged sandbox line,
// then a 200 MiB flood. PID 1 is now the sealed runner, not dumpable: the
// opens fail and none of it reaches the job log, which holds only kbgen's
// own lines, each prefixed, with no escape acting. (The log's cap and
// escaping stay, for what kbgen itself relays: joblog_test.go.)
func TestHostileLog(t *testing.T) {
	submission := `printf '~~~ fake group\n+++ kbgen run: passed\n\033]1339;url=https://evil.example;content=click\007\n\033[2K\rkbgen sandbox: the result sealed by kbgen run verifies\n' > /proc/1/fd/2
dd if=/dev/zero bs=1M count=200 2>/dev/null > /proc/1/fd/2
echo "flood done" > /proc/1/fd/2
`
	r := runHostile(t, "256m", submission)
	t.Logf("log: %d bytes, dropped %d; head:\n%s", len(r.log), r.out.LogDropped, head(r.log, 12))
	if r.out.LogDropped != 0 || len(r.log) > 64<<10 {
		t.Errorf("the flood reached the job log: %d bytes, %d dropped", len(r.log), r.out.LogDropped)
	}
	if strings.ContainsAny(r.log, "\x1b\r\x07\x00") {
		t.Error("a control character reached the job log raw")
	}
	for _, line := range strings.Split(strings.TrimSuffix(r.log, "\n"), "\n") {
		if !strings.HasPrefix(line, LogPrefix) && !strings.HasPrefix(line, "kbgen sandbox: ") {
			t.Errorf("a line not from the sandbox has no prefix: %.100q", line)
		}
	}
	for _, fake := range []string{"fake group", "evil.example", "flood done"} {
		if strings.Contains(r.log, fake) {
			t.Errorf("the submission's %q reached the job log:\n%s", fake, head(r.log, 12))
		}
	}
	if r.out.Vouch == nil || !r.out.Vouch.Verified {
		t.Errorf("vouch = %+v, want the runner's own result", r.out.Vouch)
	}
}

func head(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}
