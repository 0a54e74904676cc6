// Package cpulist reads and writes the kernel's CPU list syntax
// ("0-3,8,10-11"): sysfs cpulists, cpuset.cpus, and what docker's
// --cpuset-cpus and --cpuset-mems take; and which CPUs share a physical
// core (topology.go, the one reader of sysfs's SMT siblings). The node
// planner, the sandbox and qualify all speak of the same CPUs, so they
// share one type (Set), one parser and one grouping into cores.
package cpulist

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Set is CPU (or NUMA node) numbers, sorted and unique: what Parse
// returns and every part of kbgen passes around (the node's plan, the
// sandbox's placement, qualify's pinning).
type Set []int

// String writes the set in list syntax, ranges collapsed.
func (s Set) String() string { return Format(s) }

// MaxCPU bounds parsing, so "0-999999999" cannot allocate the world.
const MaxCPU = 1 << 16

// Parse reads list syntax into sorted, unique numbers. An empty string is
// an empty list (a memory-only NUMA node has an empty cpulist); callers
// that need CPUs check the length.
func Parse(s string) (Set, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out Set
	for part := range strings.SplitSeq(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := parseOne(lo)
		if err != nil {
			return nil, fmt.Errorf("bad cpu list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = parseOne(hi); err != nil {
				return nil, fmt.Errorf("bad cpu list %q: %w", s, err)
			}
			if b < a {
				return nil, fmt.Errorf("bad cpu list %q: range %s is backwards", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func parseOne(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n >= MaxCPU {
		return 0, fmt.Errorf("%q is not a cpu number", s)
	}
	return n, nil
}

// Format writes sorted, unique numbers in list syntax with ranges
// collapsed, the form the kernel prints.
func Format(l []int) string {
	var b strings.Builder
	for i := 0; i < len(l); {
		j := i
		for j+1 < len(l) && l[j+1] == l[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(l[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(l[j]))
		}
		i = j + 1
	}
	return b.String()
}
