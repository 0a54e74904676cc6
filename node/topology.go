package node

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/cpulist"
)

// Topology is the CPU and memory layout of the machine, per NUMA node, as
// the kernel reports it under /sys.
type Topology struct {
	Nodes []NUMANode
}

// NUMANode is one NUMA node: its online CPUs grouped into physical cores,
// and its memory.
type NUMANode struct {
	ID int
	// Cores are the node's physical cores, each the list of its SMT
	// siblings, ordered by their lowest CPU number.
	Cores []cpulist.Set
	// MemTotal is the node's memory in bytes.
	MemTotal int64
}

// CPUs is every CPU of the node.
func (n *NUMANode) CPUs() cpulist.Set {
	var all cpulist.Set
	for _, c := range n.Cores {
		all = append(all, c...)
	}
	slices.Sort(all)
	return all
}

// Node returns the NUMA node with id, or nil.
func (t *Topology) Node(id int) *NUMANode {
	for i := range t.Nodes {
		if t.Nodes[i].ID == id {
			return &t.Nodes[i]
		}
	}
	return nil
}

// ReadTopology reads NUMA nodes, cores and memory from sys, a view of
// /sys (os.DirFS("/sys"), or a fixture tree).
func ReadTopology(sys fs.FS) (*Topology, error) {
	entries, err := fs.ReadDir(sys, "devices/system/node")
	if err != nil {
		return nil, fmt.Errorf("reading NUMA nodes: %w (is this Linux with NUMA sysfs, or is --sysfs pointing at a /sys tree?)", err)
	}
	online, err := readOnlineCPUs(sys)
	if err != nil {
		return nil, err
	}
	var topo Topology
	for _, e := range entries {
		id, ok := strings.CutPrefix(e.Name(), "node")
		n, err := strconv.Atoi(id)
		if !ok || err != nil {
			continue
		}
		node, err := readNUMANode(sys, n, online)
		if err != nil {
			return nil, err
		}
		topo.Nodes = append(topo.Nodes, node)
	}
	if len(topo.Nodes) == 0 {
		return nil, errors.New("reading NUMA nodes: devices/system/node has no nodeN directory")
	}
	slices.SortFunc(topo.Nodes, func(a, b NUMANode) int { return a.ID - b.ID })
	return &topo, nil
}

// readOnlineCPUs returns the online CPUs, or nil (no filter) when the
// file is absent.
func readOnlineCPUs(sys fs.FS) (cpulist.Set, error) {
	data, err := fs.ReadFile(sys, "devices/system/cpu/online")
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading online CPUs: %w", err)
	}
	l, err := cpulist.Parse(string(data))
	if err != nil {
		return nil, fmt.Errorf("reading online CPUs: %w", err)
	}
	return l, nil
}

func readNUMANode(sys fs.FS, id int, online cpulist.Set) (NUMANode, error) {
	dir := fmt.Sprintf("devices/system/node/node%d", id)
	node := NUMANode{ID: id}
	data, err := fs.ReadFile(sys, dir+"/cpulist")
	if err != nil {
		return node, fmt.Errorf("reading NUMA node %d CPUs: %w", id, err)
	}
	cpus, err := cpulist.Parse(string(data))
	if err != nil {
		return node, fmt.Errorf("reading NUMA node %d CPUs: %w", id, err)
	}
	if online != nil {
		cpus = slices.DeleteFunc(cpus, func(c int) bool { return !slices.Contains(online, c) })
	}
	// Group SMT siblings so a cpuset always holds whole cores: two agents
	// sharing one core's execution units would disturb each other's timings.
	if node.Cores, err = cpus.Cores(sys); err != nil {
		return node, err
	}
	mem, err := fs.ReadFile(sys, dir+"/meminfo")
	if err != nil {
		return node, fmt.Errorf("reading NUMA node %d memory: %w", id, err)
	}
	if node.MemTotal, err = parseNodeMemTotal(string(mem)); err != nil {
		return node, fmt.Errorf("reading NUMA node %d memory: %w", id, err)
	}
	return node, nil
}

// parseNodeMemTotal reads "Node 0 MemTotal:  263784508 kB" from a node's
// meminfo.
func parseNodeMemTotal(meminfo string) (int64, error) {
	for line := range strings.Lines(meminfo) {
		_, rest, ok := strings.Cut(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			break
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || kb < 0 {
			break
		}
		return kb * 1024, nil
	}
	return 0, errors.New("no MemTotal line in meminfo")
}
