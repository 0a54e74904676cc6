package noise

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// scenario replays testdata/<name>/before and after as /proc, /sys and the
// stand-in nvidia-smi's readings around one run of key.
type scenario struct {
	t    testing.TB
	dir  string
	root string
	cfg  Config
}

func newScenario(t testing.TB, name string, extraEnv ...string) *scenario {
	t.Helper()
	bin, _ := filepath.Abs("testdata/bin")
	root := t.TempDir()
	s := &scenario{t: t, dir: filepath.Join("testdata", name), root: filepath.Join(root, "tree")}
	clock := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	var ru syscall.Rusage
	s.cfg = Config{
		ProcRoot: filepath.Join(s.root, "proc"),
		SysRoot:  filepath.Join(s.root, "sys"),
		Env:      append([]string{"PATH=" + bin + ":/usr/bin:/bin", "NVSMI_DIR=" + filepath.Join(s.root, "nvsmi")}, extraEnv...),
		Self:     4242,
		Rusage: func() (syscall.Rusage, error) {
			r := ru
			ru.Nivcsw += 7
			ru.Nvcsw += 100
			return r, nil
		},
		Now: func() time.Time { c := clock; clock = clock.Add(time.Second); return c },
	}
	return s
}

func (s *scenario) load(phase string) {
	s.t.Helper()
	if err := os.RemoveAll(s.root); err != nil {
		s.t.Fatal(err)
	}
	if err := os.CopyFS(s.root, os.DirFS(filepath.Join(s.dir, phase))); err != nil {
		s.t.Fatal(err)
	}
}

// run records one run of key and returns the record under p.
func (s *scenario) run(key string, p Policy) *Record {
	s.t.Helper()
	s.load("before")
	smp := NewSampler(s.cfg)
	defer smp.Close()
	smp.Begin(key)
	s.load("after")
	smp.End(key)
	return smp.Record(p)
}

func reasonsOf(rec *Record) string {
	var b strings.Builder
	for _, r := range rec.Reasons {
		ext := "self"
		if r.External {
			ext = "external"
		}
		b.WriteString(r.Run + " " + r.Source + " " + ext + ": " + r.Message + "\n")
	}
	return b.String()
}

func TestVMWithStealAndANeighbour(t *testing.T) {
	rec := newScenario(t, "vm").run("leaderboard", Policy{})
	run := rec.Runs["leaderboard"]
	if run == nil {
		t.Fatalf("no leaderboard run in %+v", rec)
	}
	if run.CPUs != "1" {
		t.Errorf("cpus = %q, want 1 (the runner's Cpus_allowed_list)", run.CPUs)
	}
	if run.Steal.Status != OK || run.Steal.StealPercent != 20 || run.Steal.StealMS != 200 {
		t.Errorf("steal = %+v, want 20 %% (20 of cpu1's 100 ticks), 200 ms", run.Steal)
	}
	f := run.Foreign
	// stress used 300 ms on CPUs 0-1: half of it could be cpu1's. dockerd
	// is confined to cpu0, the runner itself (4242) is not foreign, and
	// ksoftirqd is a kernel thread.
	if f.Status != OK || f.CPUMS != 150 || f.CPUPercent != 15 || f.KernelThreadsMS != 20 {
		t.Errorf("foreign = %+v, want 150 ms = 15 %% of 1 CPU x 1 s, kernel threads 20 ms", f)
	}
	if len(f.Top) != 1 || f.Top[0].Comm != "stress (x)" || f.Top[0].PID != 200 || f.Top[0].AllowedCPUs != "0-1" {
		t.Errorf("foreign top = %+v, want only stress (x)[200]", f.Top)
	}
	if run.Throttling.Status != OK || run.Throttling.CgroupVersion != 1 || run.Throttling.Throttled != 0 {
		t.Errorf("throttling = %+v, want cgroup v1, not throttled", run.Throttling)
	}
	if run.Frequency.Status != Unavailable || !strings.Contains(run.Frequency.Why, "cpufreq") {
		t.Errorf("frequency = %+v, want unavailable (no cpufreq in the tree)", run.Frequency)
	}
	if run.ContextSwitches.Involuntary != 7 || run.ContextSwitches.InvoluntaryPerSecond != 7 {
		t.Errorf("context switches = %+v, want 7 involuntary in 1 s", run.ContextSwitches)
	}
	if run.NVIDIA.Status != Unavailable || run.ROCm.Status != Unavailable {
		t.Errorf("GPU sources = %+v / %+v, want unavailable (no gpu.csv, no ROCM_DIR)", run.NVIDIA.Availability, run.ROCm.Availability)
	}
	if rec.Verdict != Noisy || run.Verdict != Noisy {
		t.Errorf("verdict = %s/%s, want noisy", rec.Verdict, run.Verdict)
	}
	got := reasonsOf(rec)
	for _, want := range []string{"leaderboard steal external: hypervisor steal 20.0 % on CPUs 1 (threshold 5 %)", "leaderboard foreign_processes external: foreign processes took up to 15.0 % of CPUs 1 (threshold 1 %): stress (x)[200]"} {
		if !strings.Contains(got, want) {
			t.Errorf("reasons lack %q:\n%s", want, got)
		}
	}
	if !rec.External() {
		t.Error("External() = false with steal and a neighbour")
	}
}

func TestThresholdsComeFromThePolicy(t *testing.T) {
	rec := newScenario(t, "vm").run("benchmark", Policy{MaxStealPercent: 25, MaxForeignPercent: 20})
	if rec.Verdict != Clean || len(rec.Reasons) != 0 {
		t.Errorf("with thresholds above what happened: verdict %s, reasons:\n%s", rec.Verdict, reasonsOf(rec))
	}
}

func TestBareMetalOwnLoadIsNotExternal(t *testing.T) {
	rec := newScenario(t, "bare").run("leaderboard", Policy{Retry: true})
	run := rec.Runs["leaderboard"]
	if run.Steal.StealPercent != 0 || run.Steal.Status != OK {
		t.Errorf("steal = %+v, want 0", run.Steal)
	}
	if run.Foreign.CPUMS != 0 {
		t.Errorf("foreign = %+v: dockerd is confined to CPUs 0-1, the job has 2-3", run.Foreign)
	}
	th := run.Throttling
	if th.CgroupVersion != 2 || th.Periods != 10 || th.Throttled != 4 || th.ThrottledMS != 40 {
		t.Errorf("throttling = %+v, want v2, 4 of 10 periods, 40 ms", th)
	}
	fr := run.Frequency
	if fr.Status != OK || fr.BeforeMinMHz != 1200 || fr.BeforeMaxMHz != 1500 || fr.AfterMinMHz != 3300 || fr.AfterMaxMHz != 3400 || fr.HardwareMHz != 3700 {
		t.Errorf("frequency = %+v", fr)
	}
	nv := run.NVIDIA
	if nv.Status != OK || nv.UUID != "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b" {
		t.Fatalf("nvidia = %+v", nv)
	}
	if *nv.Before.SMClockMHz != 1980 || *nv.After.SMClockMHz != 1755 || *nv.After.TemperatureC != 78 || *nv.After.PowerW != 690.5 {
		t.Errorf("nvidia samples = %+v / %+v", nv.Before, nv.After)
	}
	if strings.Join(nv.After.EventReasons, ",") != "sw_power_cap,sw_thermal_slowdown" || len(nv.Before.EventReasons) != 0 {
		t.Errorf("event reasons = %v before, %v after; want none (idle is left out), then sw_power_cap,sw_thermal_slowdown", nv.Before.EventReasons, nv.After.EventReasons)
	}
	if nv.EventCounters["sw_power_cap"] != 50000 || nv.EventCounters["sw_thermal_slowdown"] != 20000 {
		t.Errorf("counters = %v", nv.EventCounters)
	}
	if rec.Verdict != Clean || run.Verdict != Clean {
		t.Errorf("verdict %s (run %s), want clean: only the job's own load was seen", rec.Verdict, run.Verdict)
	}
	if len(rec.Reasons) == 0 {
		t.Error("the own-load findings are gone from the reasons; they must stay recorded")
	}
	if rec.External() {
		t.Errorf("own throttling and own thermal limits counted as external:\n%s", reasonsOf(rec))
	}
	if rec.DecideRetry(true, "0") || rec.Retry {
		t.Error("a run noisy only by its own load was retried")
	}
}

func TestExternalGPUNoise(t *testing.T) {
	rec := newScenario(t, "gpu-foreign").run("leaderboard", Policy{Retry: true})
	nv := rec.Runs["leaderboard"].NVIDIA
	if len(nv.ForeignProcesses) != 1 || nv.ForeignProcesses[0].PID != 777 {
		t.Errorf("foreign GPU processes = %+v, want only pid 777 (888 is on another GPU)", nv.ForeignProcesses)
	}
	if nv.ECCUncorrectedDelta == nil || *nv.ECCUncorrectedDelta != 1 {
		t.Errorf("ECC delta = %v, want 1", nv.ECCUncorrectedDelta)
	}
	got := reasonsOf(rec)
	for _, want := range []string{
		"nvidia external: other compute processes on the GPU: python3[777]",
		"nvidia external: 1 new uncorrected ECC errors during the run",
		"nvidia external: the GPU was already slowed before the run: hw_power_brake_slowdown",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("reasons lack %q:\n%s", want, got)
		}
	}
	// All of it is what the container's nvidia-smi says about its own
	// GPU: recorded as external, never a retry (issue 20).
	if rec.DecideRetry(true, "0") || !strings.Contains(rec.RetryReason, "cannot fake") {
		t.Errorf("a GPU report from inside the container was retried: %q", rec.RetryReason)
	}
}

func TestOldDriverFallsBackToThrottleReasons(t *testing.T) {
	rec := newScenario(t, "bare", "NVSMI_OLD=1").run("benchmark", Policy{})
	nv := rec.Runs["benchmark"].NVIDIA
	if nv.Status != OK || nv.EventCounters != nil {
		t.Fatalf("nvidia = %+v, want ok without counters", nv)
	}
	if strings.Join(nv.After.EventReasons, ",") != "sw_power_cap,sw_thermal_slowdown" {
		t.Errorf("reasons from clocks_throttle_reasons.active = %v", nv.After.EventReasons)
	}
}

func TestSourcesReportWhyTheyAreUnavailable(t *testing.T) {
	s := newScenario(t, "vm", "NVSMI_FAIL=1")
	s.cfg.Env = append(s.cfg.Env, "ROCM_DIR="+filepath.Join(s.root, "missing"))
	s.cfg.SysRoot = filepath.Join(s.root, "nosys")
	rec := s.run("benchmark", Policy{})
	run := rec.Runs["benchmark"]
	for name, a := range map[string]Availability{
		"nvidia":     run.NVIDIA.Availability,
		"rocm":       run.ROCm.Availability,
		"throttling": run.Throttling.Availability,
		"frequency":  run.Frequency.Availability,
	} {
		if a.Status != Unavailable || a.Why == "" {
			t.Errorf("%s = %+v, want unavailable with a reason", name, a)
		}
	}
	if !strings.Contains(run.NVIDIA.Why, "couldn't communicate with the NVIDIA driver") {
		t.Errorf("nvidia why = %q, want nvidia-smi's own message", run.NVIDIA.Why)
	}
	if run.Steal.Status != OK {
		t.Errorf("steal = %+v: one source failing must not take the others down", run.Steal)
	}
}

func TestROCm(t *testing.T) {
	dir, _ := filepath.Abs("testdata/rocm")
	rec := newScenario(t, "vm", "ROCM_DIR="+dir).run("benchmark", Policy{})
	r := rec.Runs["benchmark"].ROCm
	if r.Status != OK || r.Card != "card0" || *r.After.SCLKMHz != 2100 || *r.After.MCLKMHz != 1300 || *r.After.TemperatureC != 45 || *r.After.PowerW != 140 {
		t.Errorf("rocm = %+v after %+v", r, r.After)
	}
	if strings.Join(r.PIDs, ",") != "4321" {
		t.Errorf("rocm pids = %v", r.PIDs)
	}
}
