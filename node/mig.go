package node

import (
	"fmt"
	"slices"

	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/internal/size"
)

// NvidiaListArgs is the query nvsmi.ParseMIG reads (`nvidia-smi -L`).
var NvidiaListArgs = nvsmi.ListArgs

// splitMIG replaces the agent of each GPU with MIG instances by one agent
// per instance on queue: the GPU agent's whole cores and memory shared
// out evenly (a MIG-enabled GPU cannot run a whole-GPU job anyway).
func splitMIG(p *Plan, topo *Topology, migs map[int][]nvsmi.MIGInstance, queue string) error {
	var out []Agent
	for _, a := range p.Agents {
		insts := migs[a.GPU.Index]
		if len(insts) == 0 {
			out = append(out, a)
			continue
		}
		cores, err := agentCores(topo, &a)
		if err != nil {
			return err
		}
		if len(cores) < len(insts) {
			return fmt.Errorf("GPU %d has %d MIG instances but its agent %d whole cores: %w (each MIG agent needs a core)", a.GPU.Index, len(insts), len(cores), ErrTooFewCores)
		}
		per, mem := len(cores)/len(insts), a.MemoryBytes/int64(len(insts))/size.GiB*size.GiB
		for k, inst := range insts {
			var cpus cpulist.Set
			for _, c := range cores[k*per : (k+1)*per] {
				cpus = append(cpus, c...)
			}
			slices.Sort(cpus)
			m := a
			m.ID = fmt.Sprintf("gpu%d-mig%d", a.GPU.Index, k)
			m.Queue = queue
			m.GPU.UUID = inst.UUID
			m.GPU.Model = a.GPU.Model + " MIG " + inst.Profile
			m.CPUSet, m.CPUs, m.Cores = cpus.String(), len(cpus), per
			m.Memory, m.MemoryBytes = size.Bytes(mem).String(), mem
			out = append(out, m)
		}
		if left := len(cores) - per*len(insts); left > 0 {
			p.Notes = append(p.Notes, fmt.Sprintf("GPU %d: %d MIG instances on %d cores; %d core(s) stay unused by its agents", a.GPU.Index, len(insts), len(cores), left))
		}
	}
	p.Agents = out
	return nil
}

// agentCores are the NUMA node's whole cores inside the agent's cpuset.
func agentCores(topo *Topology, a *Agent) ([]cpulist.Set, error) {
	node := topo.Node(a.NUMANode)
	if node == nil {
		return nil, fmt.Errorf("agent %s: NUMA node %d is not in the topology", a.ID, a.NUMANode)
	}
	own, err := cpulist.Parse(a.CPUSet)
	if err != nil {
		return nil, err
	}
	var cores []cpulist.Set
	for _, c := range node.Cores {
		if slices.Contains(own, c[0]) {
			cores = append(cores, c)
		}
	}
	return cores, nil
}
