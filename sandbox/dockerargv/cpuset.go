package dockerargv

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"

	"github.com/gpu-mode/kbgen/internal/cpulist"
)

// parseCPUSet reads a placement's CPU or NUMA node list. Unlike a sysfs
// cpulist (a memory-only NUMA node has none), a placement names at least
// one.
func parseCPUSet(s string) (cpulist.Set, error) {
	l, err := cpulist.Parse(s)
	if err != nil {
		return nil, err
	}
	if len(l) == 0 {
		return nil, errors.New("empty CPU list")
	}
	return l, nil
}

// pickCPUs returns the first n CPUs of s, taking whole cores in order so
// a step never shares a physical core with a neighbour's step when n is a
// multiple of the SMT width. Cores come from sys (cpulist.Cores); a sysfs
// that cannot be read degrades to plain CPU order rather than failing
// the job. n larger than the set is an error.
func pickCPUs(s cpulist.Set, n int, sys fs.FS) (cpulist.Set, error) {
	if n > len(s) {
		return nil, fmt.Errorf("%d CPUs asked, the agent's cpuset %s has %d", n, s, len(s))
	}
	cores, err := s.Cores(sys)
	if err != nil {
		cores = nil
		for _, c := range s {
			cores = append(cores, cpulist.Set{c})
		}
	}
	out := make(cpulist.Set, 0, n)
	for _, c := range slices.Concat(cores...) {
		if len(out) == n {
			break
		}
		out = append(out, c)
	}
	slices.Sort(out)
	return out, nil
}
