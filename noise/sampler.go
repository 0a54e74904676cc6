package noise

import (
	"context"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// Config says where a Sampler looks.
type Config struct {
	// ProcRoot and SysRoot are /proc and /sys, or fixture trees.
	ProcRoot string
	SysRoot  string
	// Env is the environment GPU tools run with (their PATH).
	Env []string
	// GPU selects the NVIDIA GPU to query (nvidia-smi -i): a UUID or an
	// index; "" queries the first GPUCount visible ones (inside the
	// sandbox, the job's set: one, or a multi-GPU step's N).
	GPU      string
	GPUCount int
	// Self is the runner's pid, never foreign; 0 means os.Getpid().
	Self int
	// NoGPU skips nvidia-smi and rocm-smi (tests of the CPU sources).
	NoGPU bool
	// NVML is the kbgen-nvml helper NVIDIA GPUs are read through (started
	// at once, closed by Close), or why there is none: then nvidia-smi.
	NVML nvmlhelper.Location
	// NVMLSupervisor, when set, starts the helper's process and is told
	// when it is reaped: the runner's, so that its sweep of leftover
	// children after each harness spares the helper (issue 25: it killed
	// it after the first, and no timed run was read through NVML).
	NVMLSupervisor nvmlhelper.Supervisor
	// CPUs, when set, are the CPUs measured instead of this process's
	// affinity (a calibration pins one thread to one CPU).
	CPUs []int
	// Rusage replaces getrusage(RUSAGE_CHILDREN) (tests).
	Rusage func() (syscall.Rusage, error)
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// Sampler records the noise around each timed run. Begin and End bracket
// one run; Record returns everything so far with its verdict. One run at
// a time.
type Sampler struct {
	cfg    Config
	cpus   []int
	cpuErr error
	nv     *nvidiaProbe
	mu     sync.Mutex
	open   map[string]*snapshot
	runs   map[string]*Run
	order  []string
	cost   time.Duration
}

// snapshot is every source's reading at one instant.
type snapshot struct {
	at       time.Time
	stat     map[int]cpuTimes
	statErr  error
	cg       cgroupCPUStat
	cgErr    error
	ru       syscall.Rusage
	ruErr    error
	freq     freqSample
	procs    map[int]procTimes
	procsErr error
	nv       []nvidiaSample
	rocm     rocmSample
	cost     time.Duration
}

// NewSampler prepares a Sampler: it finds the CPUs this process may run
// on (the run's, since the harness inherits them).
func NewSampler(cfg Config) *Sampler {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.SysRoot == "" {
		cfg.SysRoot = "/sys"
	}
	if cfg.Self == 0 {
		cfg.Self = os.Getpid()
	}
	if cfg.Rusage == nil {
		cfg.Rusage = childrenRusage
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	s := &Sampler{cfg: cfg, open: map[string]*snapshot{}, runs: map[string]*Run{}}
	s.cpus, s.cpuErr = allowedCPUs(cfg.ProcRoot, "self")
	if len(cfg.CPUs) > 0 {
		s.cpus, s.cpuErr = cfg.CPUs, nil
	}
	s.nv = &nvidiaProbe{env: cfg.Env, gpu: cfg.GPU, count: cfg.GPUCount}
	if cfg.NoGPU {
		cfg.NVML = nvmlhelper.Location{Absent: "GPU sources off"}
	}
	s.nv.nvml = startNVML(cfg.NVML, cfg.Env, cfg.NVMLSupervisor)
	return s
}

// Close ends the NVML helper; the record taken so far stays readable.
// A nil Sampler is closed already.
func (s *Sampler) Close() {
	if s != nil {
		s.nv.nvml.close()
	}
}

// CPUs are the CPUs the runs are measured on.
func (s *Sampler) CPUs() []int { return s.cpus }

// Begin takes the before sample of run key.
func (s *Sampler) Begin(key string) {
	start := time.Now()
	snap := s.take()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.open[key] = snap
	s.cost += time.Since(start)
}

// End takes the after sample of run key and records the run.
func (s *Sampler) End(key string) {
	start := time.Now()
	after := s.take()
	s.mu.Lock()
	defer s.mu.Unlock()
	before, ok := s.open[key]
	if !ok {
		return
	}
	delete(s.open, key)
	run := s.compare(before, after)
	run.CostMS = round2(float64(time.Since(start)+s.costOf(before)) / 1e6)
	if _, dup := s.runs[key]; !dup {
		s.order = append(s.order, key)
	}
	s.runs[key] = run
	s.cost += time.Since(start)
}

// costOf is what taking snap cost, kept on the snapshot.
func (s *Sampler) costOf(snap *snapshot) time.Duration { return snap.cost }

// Measured reports whether any run was recorded.
func (s *Sampler) Measured() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.runs) > 0
}

// take reads every source once; the GPU tools run concurrently with the
// file reads, which are sequential and cheap.
func (s *Sampler) take() *snapshot {
	t0 := time.Now()
	snap := &snapshot{}
	var wg sync.WaitGroup
	if !s.cfg.NoGPU {
		ctx := context.Background()
		wg.Add(2)
		go func() { defer wg.Done(); snap.nv = s.nv.sample(ctx) }()
		go func() { defer wg.Done(); snap.rocm = rocmProbe(ctx, s.cfg.Env) }()
	}
	snap.at = s.cfg.Now()
	snap.stat, snap.statErr = readStat(s.cfg.ProcRoot)
	if path, v, err := findCPUStat(s.cfg.ProcRoot, s.cfg.SysRoot); err == nil {
		snap.cg, snap.cgErr = readCPUStat(path, v)
	} else {
		snap.cgErr = err
	}
	snap.ru, snap.ruErr = s.cfg.Rusage()
	snap.freq = readFreq(s.cfg.SysRoot, s.cpus)
	snap.procs, snap.procsErr = readProcs(s.cfg.ProcRoot)
	wg.Wait()
	snap.cost = time.Since(t0)
	return snap
}

// compare turns two snapshots into a run record.
func (s *Sampler) compare(b, a *snapshot) *Run {
	wall := a.at.Sub(b.at)
	wallMS := float64(wall) / 1e6
	r := &Run{Start: b.at, End: a.at, DurationMS: round2(wallMS), CPUs: formatCPUs(s.cpus)}
	switch {
	case s.cpuErr != nil:
		r.Steal = StealReport{Availability: unavailable("the run's CPUs are unknown: %v", s.cpuErr)}
	case b.statErr != nil || a.statErr != nil:
		r.Steal = StealReport{Availability: unavailable("%v", firstErr(b.statErr, a.statErr))}
	default:
		r.Steal = stealReport(b.stat, a.stat, s.cpus)
	}
	if err := firstErr(b.cgErr, a.cgErr); err != nil {
		r.Throttling = ThrottleReport{Availability: unavailable("%v", err)}
	} else {
		r.Throttling = throttleReport(b.cg, a.cg)
	}
	if err := firstErr(b.ruErr, a.ruErr); err != nil {
		r.ContextSwitches = CtxSwitchReport{Availability: unavailable("getrusage: %v", err)}
	} else {
		r.ContextSwitches = ctxSwitchReport(b.ru, a.ru, wall.Seconds())
	}
	r.Frequency = freqReport(s.cfg.SysRoot, s.cpus, b.freq, a.freq)
	switch {
	case s.cpuErr != nil:
		r.Foreign = ForeignReport{Availability: unavailable("the run's CPUs are unknown: %v", s.cpuErr)}
	case b.procsErr != nil || a.procsErr != nil:
		r.Foreign = ForeignReport{Availability: unavailable("%v", firstErr(b.procsErr, a.procsErr))}
	default:
		r.Foreign = foreignReport(s.cfg.ProcRoot, s.cfg.Self, s.cpus, b.procs, a.procs, wallMS)
	}
	if s.cfg.NoGPU {
		r.NVIDIA = NVIDIAReport{Availability: unavailable("GPU sources off"), ForeignProcesses: []GPUProcess{}}
		r.ROCm = ROCmReport{Availability: unavailable("GPU sources off")}
	} else {
		r.NVIDIA, r.NVIDIAPeers = nvidiaReports(b.nv, a.nv)
		r.ROCm = rocmReport(b.rocm, a.rocm)
	}
	return r
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func formatCPUs(cpus []int) string {
	if len(cpus) == 0 {
		return "none"
	}
	return cpulist.Format(cpus)
}

func round2(f float64) float64 {
	if f < 0 {
		return -round2(-f)
	}
	return float64(int64(f*100+0.5)) / 100
}

// GPUFromEnv picks the GPU to query from a runner environment: the
// agent's GPU UUID where the node exports it, else the first entry of
// CUDA_VISIBLE_DEVICES, else "" (the first visible GPU).
func GPUFromEnv(env []string, uuidVar string) string {
	get := func(k string) string {
		for _, kv := range env {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v
			}
		}
		return ""
	}
	if v := get(uuidVar); v != "" {
		return v
	}
	if v := get("CUDA_VISIBLE_DEVICES"); v != "" {
		first, _, _ := strings.Cut(v, ",")
		return strings.TrimSpace(first)
	}
	return ""
}
