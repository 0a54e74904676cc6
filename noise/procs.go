package noise

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/cpulist"
)

// pfKthread is PF_KTHREAD in /proc/<pid>/stat's flags.
const pfKthread = 0x00200000

// maxListed bounds the foreign processes a record names.
const maxListed = 5

// ForeignReport is the CPU time other processes used during the run that
// could have come from the run's CPUs: every process that is not the
// runner and not the run's own (the run's are gone by the after sample),
// weighted by the share of its allowed CPUs that are the run's. On a node
// whose housekeeping CPUs confine the host (kbgen node install), nothing
// foreign may run there. Inside a container only the container's
// processes are visible; the note says so.
type ForeignReport struct {
	Availability
	Visible int `json:"processes_visible"`
	// CPUPercent is the foreign CPU time, in percent of the run's CPU
	// capacity (wall time × CPUs).
	CPUPercent float64 `json:"cpu_percent"`
	CPUMS      float64 `json:"cpu_ms"`
	// KernelThreadsMS is kernel threads' CPU time (weighted the same
	// way): recorded, not judged.
	KernelThreadsMS float64          `json:"kernel_threads_cpu_ms"`
	Top             []ForeignProcess `json:"top,omitempty"`
}

// ForeignProcess is one process that ran during the window and may use
// the run's CPUs.
type ForeignProcess struct {
	PID         int     `json:"pid"`
	Comm        string  `json:"comm"`
	CPUMS       float64 `json:"cpu_ms"`
	AllowedCPUs string  `json:"allowed_cpus"`
}

// procTimes is one process's CPU time (ticks) and identity.
type procTimes struct {
	comm    string
	ticks   uint64
	kthread bool
}

// readProcs reads /proc/<pid>/stat of every visible process.
func readProcs(procRoot string) (map[int]procTimes, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, err
	}
	out := make(map[int]procTimes, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // it exited meanwhile
		}
		if t, ok := parseProcStat(b); ok {
			out[pid] = t
		}
	}
	return out, nil
}

// parseProcStat reads comm, flags, utime and stime. comm may hold spaces
// and parentheses, so the fields are counted from the last ')'.
func parseProcStat(b []byte) (procTimes, bool) {
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return procTimes{}, false
	}
	f := strings.Fields(string(b[end+1:]))
	// f[0] is field 3 (state): flags is field 9, utime 14, stime 15.
	if len(f) < 13 {
		return procTimes{}, false
	}
	flags, err1 := strconv.ParseUint(f[6], 10, 64)
	ut, err2 := strconv.ParseUint(f[11], 10, 64)
	st, err3 := strconv.ParseUint(f[12], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return procTimes{}, false
	}
	return procTimes{comm: string(b[open+1 : end]), ticks: ut + st, kthread: flags&pfKthread != 0}, true
}

// allowedCPUs reads Cpus_allowed_list from /proc/<pid>/status.
func allowedCPUs(procRoot string, pid string) ([]int, error) {
	return cpulist.Allowed(os.DirFS(procRoot), pid)
}

func foreignReport(procRoot string, self int, cpus []int, before, after map[int]procTimes, wallMS float64) ForeignReport {
	r := ForeignReport{Availability: Availability{Status: OK}, Visible: len(after)}
	if ev := containerEvidence(procRoot); ev != "" {
		r.Why = "in a container (" + ev + "): only its own processes are visible"
	}
	for pid, a := range after {
		b, ok := before[pid]
		if pid == self || !ok || a.comm != b.comm || a.ticks <= b.ticks {
			continue
		}
		allowed, err := allowedCPUs(procRoot, strconv.Itoa(pid))
		if err != nil || len(allowed) == 0 {
			continue
		}
		shared := 0
		for _, c := range allowed {
			if slices.Contains(cpus, c) {
				shared++
			}
		}
		if shared == 0 {
			continue
		}
		ms := float64(a.ticks-b.ticks) * ticksMS * float64(shared) / float64(len(allowed))
		if a.kthread {
			r.KernelThreadsMS += ms
			continue
		}
		r.CPUMS += ms
		r.Top = append(r.Top, ForeignProcess{PID: pid, Comm: a.comm, CPUMS: round2(ms), AllowedCPUs: cpulist.Format(allowed)})
	}
	slices.SortFunc(r.Top, func(x, y ForeignProcess) int {
		if x.CPUMS != y.CPUMS {
			if x.CPUMS > y.CPUMS {
				return -1
			}
			return 1
		}
		return x.PID - y.PID
	})
	if len(r.Top) > maxListed {
		r.Top = r.Top[:maxListed]
	}
	if capacity := wallMS * float64(len(cpus)); capacity > 0 {
		r.CPUPercent = round2(100 * r.CPUMS / capacity)
	}
	r.CPUMS = round2(r.CPUMS)
	r.KernelThreadsMS = round2(r.KernelThreadsMS)
	return r
}

// initPidNS is /proc/self/ns/pid in the kernel's initial pid namespace
// (PROC_PID_INIT_INO): a process there sees every process of the machine.
const initPidNS = "pid:[4026531836]"

// containerEvidence says why only the container's own processes may be
// visible, "" when nothing says so. The pid namespace decides where it can
// be read: the lent H100's Firecracker VM runs a rootfs exported from a
// Docker image, /.dockerenv and all, yet sees every process. Otherwise pid
// 1's name proves nothing either (that VM's init is process_api); the
// marker files the engines write (beside procRoot, so a test tree can hold
// them) and pid 1's cgroup path naming an engine are the evidence.
func containerEvidence(procRoot string) string {
	ns, err := os.Readlink(filepath.Join(procRoot, "self", "ns", "pid"))
	if err == nil && ns == initPidNS {
		return ""
	}
	if why := engineEvidence(procRoot); why != "" || err != nil {
		return why
	}
	return "its own pid namespace " + ns
}

// engineEvidence is a container engine's trace: a marker file or pid 1's
// cgroup; "" when there is none.
func engineEvidence(procRoot string) string {
	root := filepath.Dir(procRoot)
	for _, f := range []string{".dockerenv", "run/.containerenv"} {
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			return "/" + f + " exists"
		}
	}
	b, err := os.ReadFile(filepath.Join(procRoot, "1", "cgroup"))
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		_, path, _ := strings.Cut(strings.TrimSpace(line), ":")
		_, path, _ = strings.Cut(path, ":")
		for _, engine := range []string{"docker", "containerd", "kubepods", "libpod", "lxc"} {
			if strings.Contains(path, engine) {
				return "pid 1's cgroup is " + path
			}
		}
	}
	return ""
}
