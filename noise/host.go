package noise

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// HostWindow is the host section's window: the sandbox samples once
// before `docker run` and once after the container exits, so its numbers
// cover the whole job (image start, tests, every timed run), never one
// timed run.
const HostWindow = "the whole job"

// engineComms are the container engine's processes. The job's own
// container start and stop keep them busy, so the host section records
// their CPU time apart and does not judge it. A name alone proves
// nothing (anyone can call a process dockerd): only one owned by root
// counts as the engine, see isEngineProc.
var engineComms = []string{"dockerd", "containerd", "containerd-shim", "containerd-shim-runc-v2", "runc", "docker-proxy", "docker"}

// HostSection is noise.json's `host` key: what `kbgen sandbox`, on the
// host, saw on the job's CPUs around the whole job. Inside the
// container's pid namespace the runner cannot see the neighbours or the
// host's processes; the sandbox can.
type HostSection struct {
	Window     string    `json:"window"`
	Verdict    Verdict   `json:"verdict"`
	Reasons    []Reason  `json:"reasons"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	DurationMS float64   `json:"duration_ms"`
	// CPUs are the job's cpuset (docker run --cpuset-cpus).
	CPUs    string        `json:"cpus"`
	Foreign ForeignReport `json:"foreign_processes"`
	// EngineMS is the container engine's CPU time on the job's CPUs
	// (weighted like Foreign): recorded, not judged.
	EngineMS float64 `json:"container_engine_cpu_ms"`
	CostMS   float64 `json:"cost_ms"`
}

// HostConfig says what the host-side watch looks at.
type HostConfig struct {
	// ProcRoot is /proc, or a fixture tree.
	ProcRoot string
	// CPUs are the job's cpuset.
	CPUs []int
	// Self is the sandbox's pid, never foreign; 0 means os.Getpid().
	Self int
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// HostWatch brackets one job from the host: BeginHost before `docker
// run`, End after the container has exited. Only processes alive at both
// samples are counted, so the container's own processes (started after
// the first sample, gone with its pid namespace before the second), its
// shim and the docker client never are.
type HostWatch struct {
	cfg    HostConfig
	start  time.Time
	before map[int]procTimes
	err    error
	cost   time.Duration
}

// BeginHost takes the first sample.
func BeginHost(cfg HostConfig) *HostWatch {
	if cfg.ProcRoot == "" {
		cfg.ProcRoot = "/proc"
	}
	if cfg.Self == 0 {
		cfg.Self = os.Getpid()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	t0 := time.Now()
	w := &HostWatch{cfg: cfg, start: cfg.Now()}
	w.before, w.err = readProcs(cfg.ProcRoot)
	w.cost = time.Since(t0)
	return w
}

// End takes the second sample and judges it against p.
func (w *HostWatch) End(p Policy) *HostSection {
	t0 := time.Now()
	p = p.WithDefaults()
	end := w.cfg.Now()
	after, err := readProcs(w.cfg.ProcRoot)
	wallMS := float64(end.Sub(w.start)) / 1e6
	h := &HostSection{Window: HostWindow, Verdict: Clean, Reasons: []Reason{}, Start: w.start, End: end,
		DurationMS: round2(wallMS), CPUs: formatCPUs(w.cfg.CPUs)}
	switch {
	case len(w.cfg.CPUs) == 0:
		h.Foreign = ForeignReport{Availability: unavailable("the job's cpuset is unknown")}
	case firstErr(w.err, err) != nil:
		h.Foreign = ForeignReport{Availability: unavailable("%v", firstErr(w.err, err))}
	default:
		bOther, bEngine := splitEngine(w.cfg.ProcRoot, w.before)
		aOther, aEngine := splitEngine(w.cfg.ProcRoot, after)
		h.Foreign = foreignReport(w.cfg.ProcRoot, w.cfg.Self, w.cfg.CPUs, bOther, aOther, wallMS)
		h.Foreign.Why = "seen from the host around the whole job; processes that started or ended during it (the container's own, its shim, the docker client) are not counted"
		h.EngineMS = foreignReport(w.cfg.ProcRoot, w.cfg.Self, w.cfg.CPUs, bEngine, aEngine, wallMS).CPUMS
	}
	if f := h.Foreign; f.Status == OK && f.CPUPercent > p.MaxForeignPercent {
		names := make([]string, 0, len(f.Top))
		for _, t := range f.Top {
			names = append(names, fmt.Sprintf("%s[%d]", t.Comm, t.PID))
		}
		h.Verdict = Noisy
		h.Reasons = append(h.Reasons, Reason{Run: "host", Source: "foreign_processes", External: true, Vouched: true,
			Message: fmt.Sprintf("seen from the host, foreign processes took %.1f %% of CPUs %s over the whole job (threshold %g %%): %s", f.CPUPercent, h.CPUs, p.MaxForeignPercent, strings.Join(names, ", "))})
	}
	h.CostMS = round2(float64(w.cost+time.Since(t0)) / 1e6)
	return h
}

func splitEngine(procRoot string, procs map[int]procTimes) (other, engine map[int]procTimes) {
	other, engine = make(map[int]procTimes, len(procs)), map[int]procTimes{}
	for pid, p := range procs {
		if isEngine(p.comm) && realUID(procRoot, pid) == 0 {
			engine[pid] = p
		} else {
			other[pid] = p
		}
	}
	return other, engine
}

// realUID is the process's real uid from /proc/<pid>/status (readable by
// anyone, and only root can make a process's uid 0), or -1. dockerd,
// containerd, their shims and runc run as root; a rootless engine's
// processes are then counted as foreign (docs/isolation.md).
func realUID(procRoot string, pid int) int {
	b, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return -1
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "Uid:"); ok {
			f := strings.Fields(rest)
			if len(f) == 0 {
				return -1
			}
			uid, err := strconv.Atoi(f[0])
			if err != nil {
				return -1
			}
			return uid
		}
	}
	return -1
}

func isEngine(comm string) bool {
	for _, e := range engineComms {
		if comm == e {
			return true
		}
	}
	return false
}

// HostRetry is what the sandbox knows when it merges the host section,
// for the one retry decision the runner could not make: the host's
// evidence exists only after the container has exited.
type HostRetry struct {
	// Completed: the runner's own sealed result came back and it exited
	// 0 (the run completed, and the runner did not retry it).
	Completed bool
	// Ranked and Retries are DecideRetry's: the job's mode is ranked,
	// and BUILDKITE_RETRY_COUNT.
	Ranked  bool
	Retries string
}

// MergeHost puts h into the noise.json at path as its `host` key,
// replacing whatever `host` the container wrote (it writes the file
// itself, so it could forge one), and makes the top verdict noisy when
// h is. When h is noisy and the runner completed without retrying, the
// retry is decided again with the host's reasons (vouched: the
// submission can neither write nor provoke them) under the record's own
// policy; retry reports it, and the record says so (`retry`,
// `retry_reason`). merged is false, nothing written, when there is no
// noise.json (a test-only job records no noise).
func MergeHost(path string, h *HostSection, hr HostRetry) (merged, retry bool, err error) {
	rec, err := readWithoutHost(path)
	if os.IsNotExist(err) {
		return false, false, nil
	}
	if err != nil {
		return false, false, fmt.Errorf("merging the host section into %s: %w", contract.NoiseFile, err)
	}
	rec.Host = h
	// The runner's reasons stay; any "host" reason the container wrote
	// goes, and the sandbox's own are added.
	kept := rec.Reasons[:0]
	for _, r := range rec.Reasons {
		if r.Run != "host" {
			kept = append(kept, r)
		}
	}
	rec.Reasons = append(kept, h.Reasons...)
	if rec.Reasons == nil {
		rec.Reasons = []Reason{}
	}
	if h.Verdict == Noisy {
		rec.Verdict = Noisy
		if hr.Completed && !rec.Retry {
			retry = rec.DecideRetry(hr.Ranked, hr.Retries)
		}
	}
	if err := Write(path, rec); err != nil {
		// Unrecorded, a retry would be invisible: none is granted.
		return true, false, err
	}
	return true, retry, nil
}

// readWithoutHost reads a noise.json with its `host` key dropped first,
// so a forged one of any shape cannot make the file unreadable.
func readWithoutHost(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return nil, fmt.Errorf("%s is not a noise record: %w", path, err)
	}
	delete(keys, "host")
	if b, err = json.Marshal(keys); err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s is not a noise record: %w", path, err)
	}
	return &r, nil
}
