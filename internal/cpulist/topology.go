package cpulist

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
)

// Siblings reads cpu's SMT siblings (itself included) from sys, a view of
// /sys (os.DirFS("/sys"), or a fixture tree). A kernel without the
// topology file (SMT off, some VMs) makes the CPU its own core.
func Siblings(sys fs.FS, cpu int) (Set, error) {
	data, err := fs.ReadFile(sys, fmt.Sprintf("devices/system/cpu/cpu%d/topology/thread_siblings_list", cpu))
	if errors.Is(err, fs.ErrNotExist) {
		return Set{cpu}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading SMT siblings of cpu%d: %w", cpu, err)
	}
	l, err := Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("reading SMT siblings of cpu%d: %w", cpu, err)
	}
	return l, nil
}

// Cores groups s into physical cores (SMT siblings together, each core
// sorted), ordered by each core's lowest CPU. Only siblings in s count: a
// core that s owns half of stays half, so the node planner and the
// sandbox never hand out a sibling that is not theirs.
func (s Set) Cores(sys fs.FS) ([]Set, error) {
	done := make(map[int]bool, len(s))
	var cores []Set
	for _, c := range s {
		if done[c] {
			continue
		}
		sib, err := Siblings(sys, c)
		if err != nil {
			return nil, err
		}
		core := Set{c}
		done[c] = true
		for _, x := range sib {
			if !done[x] && slices.Contains(s, x) {
				done[x] = true
				core = append(core, x)
			}
		}
		slices.Sort(core)
		cores = append(cores, core)
	}
	return cores, nil
}
