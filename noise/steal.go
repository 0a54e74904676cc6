package noise

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ticksMS is the length of one /proc/stat tick (USER_HZ is 100 on every
// architecture Linux exposes to user space).
const ticksMS = 10.0

// cpuTimes is one CPU's line of /proc/stat, in ticks.
type cpuTimes struct {
	total, steal uint64
}

// readStat reads the per-CPU lines of /proc/stat. The file describes the
// whole host even inside a container, which is what steal needs.
func readStat(procRoot string) (map[int]cpuTimes, error) {
	b, err := os.ReadFile(filepath.Join(procRoot, "stat"))
	if err != nil {
		return nil, err
	}
	out := map[int]cpuTimes{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.HasPrefix(line, []byte("cpu")) || len(line) < 4 || line[3] == ' ' {
			continue
		}
		f := strings.Fields(string(line))
		n, err := strconv.Atoi(f[0][3:])
		if err != nil || len(f) < 9 {
			return nil, fmt.Errorf("%s: a line with no steal column: %q", "/proc/stat", f[0])
		}
		var t cpuTimes
		// user nice system idle iowait irq softirq steal; guest and
		// guest_nice are already counted in user and nice.
		for i := 1; i <= 8; i++ {
			v, err := strconv.ParseUint(f[i], 10, 64)
			if err != nil {
				return nil, fmt.Errorf("/proc/stat: %s: %w", f[0], err)
			}
			t.total += v
			if i == 8 {
				t.steal = v
			}
		}
		out[n] = t
	}
	return out, sc.Err()
}

// StealReport is hypervisor steal on the run's CPUs: time the CPUs were
// ready to run the job but the hypervisor ran something else. Only a VM
// has it; the submission cannot cause it.
type StealReport struct {
	Availability
	// StealPercent is steal over the run's CPUs' elapsed time.
	StealPercent float64 `json:"steal_percent"`
	// MaxCPUPercent is the worst single CPU.
	MaxCPUPercent float64 `json:"max_cpu_steal_percent"`
	StealMS       float64 `json:"steal_ms"`
}

func stealReport(before, after map[int]cpuTimes, cpus []int) StealReport {
	var total, steal uint64
	worst := 0.0
	for _, c := range cpus {
		b, okb := before[c]
		a, oka := after[c]
		if !okb || !oka || a.total < b.total || a.steal < b.steal {
			continue
		}
		dt, ds := a.total-b.total, a.steal-b.steal
		total += dt
		steal += ds
		if dt > 0 {
			worst = max(worst, 100*float64(ds)/float64(dt))
		}
	}
	if total == 0 {
		return StealReport{Availability: unavailable("no /proc/stat ticks elapsed on CPUs %s (a run shorter than 10 ms, or CPUs not listed)", formatCPUs(cpus))}
	}
	return StealReport{
		Availability:  Availability{Status: OK},
		StealPercent:  round2(100 * float64(steal) / float64(total)),
		MaxCPUPercent: round2(worst),
		StealMS:       float64(steal) * ticksMS,
	}
}
