package node

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/size"
)

// Where each agent runs on a NUMA node: its cores (whole cores, SMT
// siblings together, after the host's reserved ones) and its share of the
// node's memory. The plan (plan.go) calls placeOnNode for each NUMA node's
// GPUs.

// placeOnNode splits a node's cores (after the host's) and memory evenly
// among its GPUs. It returns the agents and the CPUs left to the host.
func placeOnNode(node *NUMANode, gpus []GPU, opts PlanOptions) ([]Agent, cpulist.Set, error) {
	n := len(gpus)
	free := len(node.Cores) - opts.ReserveCores
	if free < n {
		return nil, nil, fmt.Errorf("NUMA node %d has %d cores, %d reserved for the host, for %d GPUs: %w (each agent needs at least one whole core; lower --reserve-cores or run fewer agents)",
			node.ID, len(node.Cores), min(opts.ReserveCores, len(node.Cores)), n, ErrTooFewCores)
	}
	memEach := (node.MemTotal - int64(opts.ReserveMemory)) / int64(n) / size.GiB * size.GiB
	if memEach < size.GiB {
		return nil, nil, fmt.Errorf("NUMA node %d has %d GiB of memory, %d GiB reserved for the host, for %d GPUs: %w (lower --reserve-memory)",
			node.ID, node.MemTotal/size.GiB, opts.ReserveMemory/size.GiB, n, ErrTooLittleMemory)
	}
	per := free / n
	var host cpulist.Set
	for _, c := range node.Cores[:opts.ReserveCores] {
		host = append(host, c...)
	}
	for _, c := range node.Cores[opts.ReserveCores+per*n:] {
		host = append(host, c...)
	}
	agents := make([]Agent, 0, n)
	for i, g := range gpus {
		var cpus cpulist.Set
		cores := node.Cores[opts.ReserveCores+i*per : opts.ReserveCores+(i+1)*per]
		for _, c := range cores {
			cpus = append(cpus, c...)
		}
		slices.Sort(cpus)
		agents = append(agents, Agent{
			ID:          "gpu" + strconv.Itoa(g.Index),
			GPU:         g,
			NUMANode:    node.ID,
			CPUSet:      cpus.String(),
			CPUs:        len(cpus),
			Cores:       len(cores),
			Mems:        strconv.Itoa(node.ID),
			Memory:      size.Bytes(memEach).String(),
			MemoryBytes: memEach,
		})
	}
	return agents, host, nil
}

// JobCPUs are the CPUs the agents own, all together: where step
// containers may run.
func (p *Plan) JobCPUs() string {
	var all cpulist.Set
	for _, a := range p.Agents {
		l, err := cpulist.Parse(a.CPUSet)
		if err != nil {
			continue
		}
		all = append(all, l...)
	}
	slices.Sort(all)
	return slices.Compact(all).String()
}
