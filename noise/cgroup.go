package noise

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ThrottleReport is CPU quota throttling of the runner's cgroup (the
// container's, inside the sandbox): periods in which the cgroup used up
// its CPU quota and had to wait. kbgen's sandbox sets a cpuset, not a
// quota, so any throttling comes from a quota someone else set, under
// the job's own load.
type ThrottleReport struct {
	Availability
	CgroupVersion int     `json:"cgroup_version,omitempty"`
	Periods       uint64  `json:"nr_periods"`
	Throttled     uint64  `json:"nr_throttled"`
	ThrottledMS   float64 `json:"throttled_ms"`
}

// cgroupCPUStat is the fields of cpu.stat that matter here.
type cgroupCPUStat struct {
	version     int
	periods     uint64
	throttled   uint64
	throttledNS uint64
	hasPeriods  bool
}

// findCPUStat locates the runner's cpu.stat: the cgroup v1 cpu
// controller's, else the v2 unified one's. Inside a container the
// cgroup is mounted at its own root, so the path from /proc/self/cgroup
// is tried first and the mount's root second.
func findCPUStat(procRoot, sysRoot string) (string, int, error) {
	f, err := os.Open(filepath.Join(procRoot, "self", "cgroup"))
	if err != nil {
		return "", 0, err
	}
	defer f.Close()
	var v2path string
	var candidates []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2path = parts[2]
			continue
		}
		ctrls := strings.Split(parts[1], ",")
		if !slices.Contains(ctrls, "cpu") {
			continue
		}
		base := filepath.Join(sysRoot, "fs/cgroup")
		for _, mount := range []string{parts[1], "cpu", "cpu,cpuacct", "cpuacct,cpu"} {
			candidates = append(candidates,
				filepath.Join(base, mount, parts[2], "cpu.stat"),
				filepath.Join(base, mount, "cpu.stat"))
		}
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c, 1, nil
		}
	}
	if v2path != "" {
		base := filepath.Join(sysRoot, "fs/cgroup")
		for _, c := range []string{filepath.Join(base, v2path, "cpu.stat"), filepath.Join(base, "cpu.stat")} {
			if _, err := os.Stat(c); err == nil {
				return c, 2, nil
			}
		}
	}
	return "", 0, errors.New("no cpu.stat for this process's cgroup under " + filepath.Join(sysRoot, "fs/cgroup"))
}

func readCPUStat(path string, version int) (cgroupCPUStat, error) {
	s := cgroupCPUStat{version: version}
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	for line := range strings.Lines(string(b)) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "nr_periods":
			s.periods, s.hasPeriods = n, true
		case "nr_throttled":
			s.throttled = n
		case "throttled_time": // v1, ns
			s.throttledNS = n
		case "throttled_usec": // v2
			s.throttledNS = n * 1000
		}
	}
	return s, nil
}

func throttleReport(before, after cgroupCPUStat) ThrottleReport {
	r := ThrottleReport{Availability: Availability{Status: OK}, CgroupVersion: after.version}
	if !after.hasPeriods {
		r.Why = "the cgroup has no CPU controller: no quota can throttle it"
		return r
	}
	if after.periods >= before.periods {
		r.Periods = after.periods - before.periods
	}
	if after.throttled >= before.throttled {
		r.Throttled = after.throttled - before.throttled
	}
	if after.throttledNS >= before.throttledNS {
		r.ThrottledMS = round2(float64(after.throttledNS-before.throttledNS) / 1e6)
	}
	return r
}
