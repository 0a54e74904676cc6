package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
)

// writeProc writes a fake /proc/<pid>: ticks of CPU time, allowed on cpus.
func writeProc(t *testing.T, root string, pid int, comm string, ticks int, cpus string) {
	t.Helper()
	dir := filepath.Join(root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	stat := fmt.Sprintf("%d (%s) S 1 1 1 0 -1 4194560 0 0 0 0 %d 0 0 0\n", pid, comm, ticks)
	touch(t, dir, "stat", stat)
	touch(t, dir, "status", "Cpus_allowed_list:\t"+cpus+"\n")
}

// forgedNoise is a runner's noise.json carrying a forged clean `host`.
const forgedNoise = `{"version":1,"verdict":"clean","reasons":[],"retry":false,
"policy":{"max_steal_percent":5,"max_foreign_percent":1,"retry":false},
"runs":{"benchmark":{"verdict":"clean","cpus":"2-3"}},"cost_ms":1,
"host":{"window":"the whole job","verdict":"clean","reasons":[],"foreign_processes":{"status":"ok","cpu_percent":0}}}`

// TestJobHostNoise: with a stand-in docker and a fake /proc, a host
// process on the job's cpuset that burns CPU while the container runs is
// flagged in noise.json's host section, the container's own process
// (started during the job) is not counted, the container's forged host
// section is replaced, and the top verdict turns noisy. The exit code
// stays the container's, except for a ranked job whose queue retries
// external noise, on its first attempt, whose runner completed: the
// host's evidence (the one source the submission cannot fake) earns its
// one retry, exit 75, and noise.json says so.
func TestJobHostNoise(t *testing.T) {
	tests := []struct {
		name, mode, policy, retries, exit string
		wantExit                          int
		wantRetry                         bool
		wantReason                        string // in retry_reason
	}{
		{"test job: recorded and the exit stands", "test", "false", "", "0", 0, false, ""},
		{"ranked without a retry policy: the exit stands", "leaderboard", "false", "0", "0", 0, false, ""},
		{"ranked under a retry policy on its first attempt: exit 75", "leaderboard", "true", "0", "0", 75, true, "neighbour[500]"},
		{"private under a retry policy with no retry count: exit 75", "private", "true", "", "0", 75, true, "neighbour[500]"},
		{"ranked under a retry policy already retried: stands", "leaderboard", "true", "1", "0", 0, false, "already retry 1"},
		{"ranked under a retry policy with the runner cancelled: 143 stands", "leaderboard", "true", "0", "143", 143, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, dir := fakeDocker(t)
			env := jobEnv(t)
			setMode(t, env, tt.mode)
			env["BUILDKITE_BUILD_PATH"] = t.TempDir()
			env[contract.EnvNoisePolicy] = "max_foreign_percent=2,retry=" + tt.policy
			if tt.retries != "" {
				env[contract.EnvBuildkiteRetryCount] = tt.retries
			}
			host := dockerargvtest.FakeHost(t, nil)
			j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
			if err != nil {
				t.Fatal(err)
			}
			cpus := j.Spec.CPUs()
			if len(cpus) != 2 {
				t.Fatalf("spec cpuset = %v, want the 2 CPUs the plugin asked for", cpus)
			}
			proc := t.TempDir()
			j.procRoot = proc
			pinned := fmt.Sprint(cpus[0])
			writeProc(t, proc, 500, "neighbour", 10, pinned)
			writeProc(t, proc, 501, "elsewhere", 10, "200")
			// During the job the neighbour burns CPU ticks on the job's first CPU,
			// the process elsewhere too, and the container's runner appears.
			during := fmt.Sprintf(`sleep 0.2
printf '500 (neighbour) S 1 1 1 0 -1 0 0 0 0 0 100000 0 0 0\n' > %[1]s/500/stat
printf '501 (elsewhere) S 1 1 1 0 -1 0 0 0 0 0 100000 0 0 0\n' > %[1]s/501/stat
mkdir -p %[1]s/600 && printf '600 (kbgen) S 1 1 1 0 -1 0 0 0 0 0 100000 0 0 0\n' > %[1]s/600/stat
printf 'Cpus_allowed_list:\t%[2]s\n' > %[1]s/600/status
`, proc, pinned)
			touch(t, dir, "during", during)
			// The runner's own record, sealed: its policy is the queue's.
			touch(t, dir, "noise", strings.Replace(forgedNoise, `"max_foreign_percent":1,"retry":false`, `"max_foreign_percent":2,"retry":`+tt.policy, 1))
			sealing(t, dir)
			touch(t, dir, "exit", tt.exit)

			out := t.TempDir()
			o, err := j.Run(context.Background(), l, out)
			if err != nil || o.HostNoiseErr != nil {
				t.Fatalf("run: %v, merge: %v", err, o.HostNoiseErr)
			}
			if code, msg := o.Exit(); code != tt.wantExit || o.HostRetry != tt.wantRetry {
				t.Errorf("Exit() = %d (%v), host retry %v; want %d, %v", code, msg, o.HostRetry, tt.wantExit, tt.wantRetry)
			}
			rec, err := noise.Read(filepath.Join(out, contract.NoiseFile))
			if err != nil {
				t.Fatal(err)
			}
			if rec.Host == nil || rec.Host.Verdict != noise.Noisy || rec.Verdict != noise.Noisy {
				t.Fatalf("verdict %s, host %+v: want the forged clean host replaced by a noisy one", rec.Verdict, rec.Host)
			}
			if rec.Retry != tt.wantRetry || !strings.Contains(rec.RetryReason, tt.wantReason) {
				t.Errorf("noise.json retry %v (%q); want %v with %q", rec.Retry, rec.RetryReason, tt.wantRetry, tt.wantReason)
			}
			f := rec.Host.Foreign
			if len(f.Top) != 1 || f.Top[0].PID != 500 {
				t.Errorf("foreign = %+v, want only neighbour[500] (not elsewhere[501], not the container's kbgen[600])", f.Top)
			}
			if rec.Host.CPUs != j.Spec.CPUSet() || rec.Host.Window != noise.HostWindow {
				t.Errorf("host cpus %q window %q", rec.Host.CPUs, rec.Host.Window)
			}
			if len(rec.Reasons) != 1 || !strings.Contains(rec.Reasons[0].Message, "neighbour[500]") || !strings.Contains(rec.Reasons[0].Message, "threshold 2 %") {
				t.Errorf("reasons = %+v, want the host finding against the queue's 2 %% threshold", rec.Reasons)
			}
			if o.HostNoise == nil || o.HostNoise.Verdict != noise.Noisy {
				t.Errorf("outcome host noise = %+v", o.HostNoise)
			}
		})
	}
}

// setMode re-encodes env's payload (jobEnv's) with the given mode.
func setMode(t *testing.T, env map[string]string, mode string) {
	t.Helper()
	cfg, err := payload.Decode(mustJoin(t, env))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Mode = payload.Mode(mode)
	if cfg.Mode.Ranked() {
		cfg.Benchmarks = cfg.Tests
	}
	js, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	enc, err := payload.Encode(js)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range payload.SplitEnv(enc) {
		env[k] = v
	}
}

func mustJoin(t *testing.T, env map[string]string) string {
	t.Helper()
	enc, err := payload.JoinEnv(lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

// TestJobHostNoiseNeedsARecord: a job whose runner wrote no noise.json
// (a test-only job) gets none from the sandbox either.
func TestJobHostNoiseNeedsARecord(t *testing.T) {
	l, _ := fakeDocker(t)
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	host := dockerargvtest.FakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	o, err := j.Run(context.Background(), l, out)
	if err != nil || o.HostNoiseErr != nil || o.HostNoise != nil {
		t.Fatalf("run: %v, merge: %v, host %+v; want nothing merged", err, o.HostNoiseErr, o.HostNoise)
	}
	if _, err := os.Stat(filepath.Join(out, contract.NoiseFile)); !os.IsNotExist(err) {
		t.Errorf("noise.json written for a job whose runner wrote none: %v", err)
	}
}
