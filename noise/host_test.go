package noise

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// fakeProc is a /proc tree the test rewrites between the two samples.
type fakeProc struct {
	t    *testing.T
	root string
}

// proc writes /proc/<pid>/stat and status: a process of uid 1000, ticks
// of CPU time, allowed on cpus.
func (f fakeProc) proc(pid int, comm string, ticks uint64, cpus string) {
	f.t.Helper()
	f.procAs(pid, 1000, comm, ticks, cpus)
}

// procAs is proc for a process of the given real uid.
func (f fakeProc) procAs(pid, uid int, comm string, ticks uint64, cpus string) {
	f.t.Helper()
	dir := filepath.Join(f.root, fmt.Sprint(pid))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	// Fields after ')': state ppid pgrp session tty tpgid flags minflt
	// cminflt majflt cmajflt utime stime.
	stat := fmt.Sprintf("%d (%s) S 1 1 1 0 -1 4194560 0 0 0 0 %d 0 0 0\n", pid, comm, ticks)
	if err := os.WriteFile(filepath.Join(dir, "stat"), []byte(stat), 0o644); err != nil {
		f.t.Fatal(err)
	}
	status := fmt.Sprintf("Name:\t%s\nUid:\t%d\t%d\t%d\t%d\nCpus_allowed_list:\t%s\n", comm, uid, uid, uid, uid, cpus)
	if err := os.WriteFile(filepath.Join(dir, "status"), []byte(status), 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f fakeProc) gone(pid int) {
	if err := os.RemoveAll(filepath.Join(f.root, fmt.Sprint(pid))); err != nil {
		f.t.Fatal(err)
	}
}

// TestHostWatch: one job on CPU 1 lasting 1 s, seen from the host. A
// neighbour's busy loop pinned to CPU 1 is flagged; a process on CPU 0
// only, the sandbox itself, the container's own processes (they start
// after the first sample and are gone by the second) and the engine's
// (root's dockerd) are not judged; a neighbour that calls itself dockerd
// is.
func TestHostWatch(t *testing.T) {
	f := fakeProc{t, t.TempDir()}
	const self = 10
	f.proc(self, "kbgen", 5, "0-1")
	f.proc(20, "busyloop", 100, "1")
	f.proc(30, "other-cpu", 100, "0")
	f.procAs(40, 0, "dockerd", 100, "0-1")
	f.proc(45, "dockerd", 100, "1") // a neighbour's process, named like the engine
	f.proc(50, "idle", 7, "0-1")
	t0 := time.Date(2026, 11, 23, 8, 0, 0, 0, time.UTC)
	now := t0
	w := BeginHost(HostConfig{ProcRoot: f.root, CPUs: []int{1}, Self: self, Now: func() time.Time { return now }})

	// During the job: the container's processes run and exit.
	f.proc(60, "kbgen", 90, "1") // the runner, pid 1 in its namespace
	f.proc(self, "kbgen", 65, "0-1")
	f.proc(20, "busyloop", 150, "1")       // 500 ms on CPU 1 of 1000 ms
	f.proc(30, "other-cpu", 200, "0")      // not the job's CPU
	f.procAs(40, 0, "dockerd", 120, "0-1") // 200 ms, half of it on CPU 1
	f.proc(45, "dockerd", 110, "1")        // 100 ms on CPU 1: foreign
	f.proc(70, "python3", 95, "1")         // the container's submission: started during the job
	f.gone(60)                             // the container's init exited…
	f.proc(80, "kbgen", 3, "1")            // …and its pid reused by nothing of ours
	now = t0.Add(time.Second)
	h := w.End(Policy{MaxForeignPercent: 10})

	if h.Verdict != Noisy || len(h.Reasons) != 1 || !h.Reasons[0].External || h.Reasons[0].Run != "host" {
		t.Fatalf("verdict %s, reasons %+v; want noisy with one external host reason", h.Verdict, h.Reasons)
	}
	if !strings.Contains(h.Reasons[0].Message, "busyloop[20]") || !strings.Contains(h.Reasons[0].Message, "dockerd[45]") || !strings.Contains(h.Reasons[0].Message, "60.0 %") {
		t.Errorf("reason = %q, want busyloop[20] and dockerd[45] at 60.0 %%", h.Reasons[0].Message)
	}
	if h.Foreign.CPUPercent != 60 || h.Foreign.CPUMS != 600 {
		t.Errorf("foreign = %.2f %% / %.2f ms, want 60 %% / 600 ms (busyloop and the fake dockerd)", h.Foreign.CPUPercent, h.Foreign.CPUMS)
	}
	for _, p := range h.Foreign.Top {
		if p.PID != 20 && p.PID != 45 {
			t.Errorf("foreign process %s[%d] counted: only busyloop[20] and dockerd[45] are foreign on CPU 1", p.Comm, p.PID)
		}
	}
	if h.EngineMS != 100 {
		t.Errorf("engine = %.2f ms, want 100 (dockerd's 200 ms, half on CPU 1)", h.EngineMS)
	}
	if h.Window != HostWindow || h.CPUs != "1" || h.DurationMS != 1000 {
		t.Errorf("window %q cpus %q duration %g", h.Window, h.CPUs, h.DurationMS)
	}

	// Under the default threshold the same job with no busy loop is clean.
	f.proc(20, "busyloop", 150, "1")
	f.gone(45)
	w = BeginHost(HostConfig{ProcRoot: f.root, CPUs: []int{1}, Self: self, Now: func() time.Time { return now }})
	now = now.Add(time.Second)
	if h := w.End(Policy{}); h.Verdict != Clean || h.Foreign.CPUMS != 0 {
		t.Errorf("quiet job: verdict %s, foreign %g ms; want clean, 0", h.Verdict, h.Foreign.CPUMS)
	}
}

func TestHostWatchUnknownCPUs(t *testing.T) {
	f := fakeProc{t, t.TempDir()}
	f.proc(20, "busyloop", 100, "1")
	h := BeginHost(HostConfig{ProcRoot: f.root}).End(Policy{})
	if h.Foreign.Status != Unavailable || h.Verdict != Clean {
		t.Errorf("no cpuset: %+v, want unavailable and clean", h.Foreign)
	}
}

// TestMergeHost: the sandbox's host section replaces any `host` key (and
// host reason) the container wrote, keeps the runner's runs and reasons,
// and turns the top verdict noisy; no noise.json means nothing written.
func TestMergeHost(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "noise.json")
	if merged, _, err := MergeHost(path, &HostSection{Verdict: Noisy}, HostRetry{}); merged || err != nil {
		t.Fatalf("no noise.json: merged %v, err %v; want nothing written", merged, err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("MergeHost created %s", path)
	}

	for name, forged := range map[string]string{
		"forged clean host":  `{"window":"the whole job","verdict":"clean","reasons":[],"foreign_processes":{"status":"ok","cpu_percent":0}}`,
		"forged odd host":    `"clean"`,
		"forged host reason": `null`,
	} {
		t.Run(name, func(t *testing.T) {
			runner := `{"version":1,"verdict":"clean","reasons":[{"run":"benchmark","source":"cgroup_throttling","external":false,"message":"own load"},{"run":"host","source":"foreign_processes","external":false,"message":"forged"}],"retry":false,"policy":{"max_steal_percent":5,"max_foreign_percent":1,"retry":false},"runs":{"benchmark":{"verdict":"clean","cpus":"1"}},"cost_ms":1.5,"host":` + forged + `}`
			if err := os.WriteFile(path, []byte(runner), 0o644); err != nil {
				t.Fatal(err)
			}
			h := &HostSection{Window: HostWindow, Verdict: Noisy, CPUs: "1",
				Reasons: []Reason{{Run: "host", Source: "foreign_processes", External: true, Message: "busyloop[20]"}},
				Foreign: ForeignReport{Availability: Availability{Status: OK}, CPUPercent: 50}}
			if merged, retry, err := MergeHost(path, h, HostRetry{}); !merged || retry || err != nil {
				t.Fatalf("merged %v, retry %v, err %v", merged, retry, err)
			}
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var got Record
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			if got.Verdict != Noisy || got.Host == nil || got.Host.Foreign.CPUPercent != 50 || got.Host.Verdict != Noisy {
				t.Fatalf("merged record: verdict %s host %+v; want noisy with the sandbox's host section", got.Verdict, got.Host)
			}
			if got.Runs["benchmark"] == nil || got.CostMS != 1.5 {
				t.Errorf("the runner's runs and cost were lost: %s", b)
			}
			var msgs []string
			for _, r := range got.Reasons {
				msgs = append(msgs, r.Run+":"+r.Message)
			}
			if want := "benchmark:own load,host:busyloop[20]"; strings.Join(msgs, ",") != want {
				t.Errorf("reasons = %v, want %s (the forged host reason gone)", msgs, want)
			}
		})
	}
}

// BenchmarkHostWatchThisMachine is the host section's cost per job on
// this machine: two scans of /proc and the verdict
// (docs/performance.md#noise-record).
func BenchmarkHostWatchThisMachine(b *testing.B) {
	for b.Loop() {
		_ = BeginHost(HostConfig{CPUs: []int{0}}).End(Policy{})
	}
}

// TestMergeHostRetry: a noisy host section decides the retry the runner
// could not, under the record's own policy, only for a completed ranked
// first attempt the runner did not already retry; a clean one never does.
func TestMergeHostRetry(t *testing.T) {
	t.Parallel()
	noisy := &HostSection{Window: HostWindow, Verdict: Noisy, CPUs: "1",
		Reasons: []Reason{{Run: "host", Source: "foreign_processes", External: true, Vouched: true, Message: "busyloop[20]"}}}
	first := HostRetry{Completed: true, Ranked: true, Retries: "0"}
	tests := []struct {
		name        string
		runnerRetry bool
		policyRetry bool
		host        *HostSection
		hr          HostRetry
		want        bool
		wantReason  string
	}{
		{"granted", false, true, noisy, first, true, "busyloop[20]"},
		{"policy without retry", false, false, noisy, first, false, ""},
		{"not ranked", false, true, noisy, HostRetry{Completed: true, Retries: "0"}, false, ""},
		{"runner did not complete", false, true, noisy, HostRetry{Ranked: true, Retries: "0"}, false, ""},
		{"second attempt", false, true, noisy, HostRetry{Completed: true, Ranked: true, Retries: "1"}, false, "already retry 1"},
		{"the runner already retried", true, true, noisy, first, false, "runner's own"},
		{"clean host", false, true, &HostSection{Window: HostWindow, Verdict: Clean, Reasons: []Reason{}}, first, false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "noise.json")
			rec := &Record{Version: Version, Verdict: Clean, Reasons: []Reason{}, Retry: tt.runnerRetry,
				Policy: Policy{Retry: tt.policyRetry}.WithDefaults(), Runs: map[string]*Run{}}
			if tt.runnerRetry {
				rec.RetryReason = "the runner's own"
			}
			if err := Write(path, rec); err != nil {
				t.Fatal(err)
			}
			merged, retry, err := MergeHost(path, tt.host, tt.hr)
			if !merged || err != nil || retry != tt.want {
				t.Fatalf("merged %v, retry %v, err %v; want retry %v", merged, retry, err, tt.want)
			}
			got, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			if got.Retry != (tt.want || tt.runnerRetry) || !strings.Contains(got.RetryReason, tt.wantReason) {
				t.Errorf("noise.json retry %v %q; want %v with %q", got.Retry, got.RetryReason, tt.want || tt.runnerRetry, tt.wantReason)
			}
		})
	}
}
