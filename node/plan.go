package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/size"
)

// Defaults for what each NUMA node keeps for the host (dockerd, the agents
// themselves, sshd, IRQs).
const (
	// DefaultReserveCores is the housekeeping share: one whole core (its
	// SMT siblings together) per NUMA node, where the OS services,
	// dockerd, containerd, the agents and kbgen itself are confined.
	DefaultReserveCores             = 1
	DefaultReserveMemory size.Bytes = 16 * size.GiB
)

// PlanOptions tune a plan.
type PlanOptions struct {
	// Queue is the Buildkite queue the agents serve.
	Queue string
	// ReserveCores is how many whole cores of each NUMA node stay with the
	// host: the node's first cores, where the kernel's housekeeping and most
	// IRQs land.
	ReserveCores int
	// ReserveMemory is how much of each NUMA node's memory stays with the host.
	ReserveMemory size.Bytes
	// CgroupVersion is the node's cgroup hierarchy (1 or 2): it decides how
	// the host is confined to its housekeeping CPUs.
	CgroupVersion int
	// Shapes are multi-GPU queues served besides Queue (mig.go, shapes.go).
	Shapes []Shape
	// MIGQueue, when set, is the queue of one agent per MIG instance on
	// each GPU with MIG enabled (nvidia-smi -L lists its instances).
	MIGQueue string
}

// Plan is one agent per GPU with its placement.
type Plan struct {
	Queue   string           `json:"queue,omitempty"`
	Runtime contract.Runtime `json:"runtime"`
	// ReserveCores and ReserveMemory are what each NUMA node keeps.
	ReserveCores  int        `json:"reserve_cores_per_node"`
	ReserveMemory size.Bytes `json:"reserve_memory_bytes_per_node"`
	// HostCPUs are the CPUs no agent owns: the reserved cores, what did
	// not divide evenly, and NUMA nodes without GPUs. The agents' own
	// processes (not their containers) run there, via the systemd slice.
	HostCPUs string `json:"host_cpus"`
	// CgroupVersion is 2 on a unified hierarchy, 1 otherwise: on v2 the
	// host's slices get AllowedCPUs=HostCPUs and step containers go to
	// JobsSlice; on v1 the service manager's CPUAffinity= does it.
	CgroupVersion int      `json:"cgroup_version"`
	Agents        []Agent  `json:"agents"`
	Notes         []string `json:"notes,omitempty"`
}

// Agent is one Buildkite agent and the one GPU, CPUs and memory it owns.
type Agent struct {
	// ID names the agent's files and systemd instance: "gpu3" is
	// buildkite-agent-gpu@3.service.
	ID       string `json:"id"`
	GPU      GPU    `json:"gpu"`
	NUMANode int    `json:"numa_node"`
	// CPUSet lists whole cores (SMT siblings together) on NUMANode.
	CPUSet string `json:"cpuset"`
	CPUs   int    `json:"cpus"`
	Cores  int    `json:"cores"`
	Mems   string `json:"mems"`
	// Memory is docker syntax ("120g"), MemoryBytes the same in bytes.
	Memory      string `json:"memory"`
	MemoryBytes int64  `json:"memory_bytes"`
	// Queue is the agent's queue when it is not the plan's: a multi-GPU
	// shape's (nvidia-h100x8) or the MIG queue.
	Queue string `json:"queue,omitempty"`
	// GPUs is a multi-GPU agent's set (GPU is its first); Link the
	// slowest link within it.
	GPUs []GPU  `json:"gpus,omitempty"`
	Link string `json:"link,omitempty"`
}

// Unit is the agent's systemd instance: "gpu3" is
// buildkite-agent-gpu@3.service, "gpux8-0" buildkite-agent-gpu@x8-0.service.
func (a *Agent) Unit() string {
	return "buildkite-agent-gpu@" + strings.TrimPrefix(a.ID, "gpu") + ".service"
}

// ErrTooFewCores is returned when a NUMA node has fewer cores left after
// the host reserve than GPUs: an agent without a whole core of its own
// would share one with a neighbour, so kbgen refuses rather than plan a
// placement that is not isolated.
var ErrTooFewCores = errors.New("too few cores")

// ErrTooLittleMemory is returned when a NUMA node's memory after the host
// reserve leaves a GPU's agent less than 1 GiB.
var ErrTooLittleMemory = errors.New("less than 1 GiB each")

// ErrNoGPUs is a machine where no GPU is found: no amdgpu device, and
// nvidia-smi (or NVML) lists none or cannot run.
var ErrNoGPUs = errors.New("no GPUs found")

// noGPUsError is a GPU listing that names none, in its tool's words; it
// is ErrNoGPUs.
type noGPUsError string

func (e noGPUsError) Error() string      { return string(e) }
func (noGPUsError) Is(target error) bool { return target == ErrNoGPUs }

// MakePlan places one agent per GPU. numaOf gives each GPU's NUMA node
// (ok=false when the firmware does not say).
func MakePlan(topo *Topology, rt contract.Runtime, gpus []GPU, numaOf func(GPU) (int, bool, error), opts PlanOptions) (*Plan, error) {
	if len(gpus) == 0 {
		return nil, ErrNoGPUs
	}
	if opts.ReserveCores < 0 {
		return nil, fmt.Errorf("reserve cores %d: must not be negative", opts.ReserveCores)
	}
	if opts.ReserveMemory < 0 {
		return nil, fmt.Errorf("reserve memory %d: must not be negative", opts.ReserveMemory)
	}
	p := &Plan{Queue: opts.Queue, Runtime: rt, ReserveCores: opts.ReserveCores, ReserveMemory: opts.ReserveMemory, CgroupVersion: opts.CgroupVersion}
	if p.CgroupVersion != 2 {
		p.CgroupVersion = 1
	}
	byNode := map[int][]GPU{}
	for _, g := range gpus {
		n, ok, err := numaOf(g)
		if err != nil {
			return nil, err
		}
		if !ok {
			p.Notes = append(p.Notes, fmt.Sprintf("GPU %d (%s): firmware reports no NUMA node (-1); placed on node 0", g.Index, g.PCIBus))
			n = 0
		}
		if topo.Node(n) == nil {
			return nil, fmt.Errorf("GPU %d (%s) is on NUMA node %d, which sysfs does not list", g.Index, g.PCIBus, n)
		}
		byNode[n] = append(byNode[n], g)
	}
	var host cpulist.Set
	for _, node := range topo.Nodes {
		gs := byNode[node.ID]
		if len(gs) == 0 {
			host = append(host, node.CPUs()...)
			continue
		}
		agents, rest, err := placeOnNode(&node, gs, opts)
		if err != nil {
			return nil, err
		}
		host = append(host, rest...)
		p.Agents = append(p.Agents, agents...)
	}
	slices.SortFunc(p.Agents, func(a, b Agent) int { return a.GPU.Index - b.GPU.Index })
	slices.Sort(host)
	p.HostCPUs = host.String()
	return p, nil
}

// Agent returns the agent owning GPU index, or nil.
func (p *Plan) Agent(index int) *Agent {
	for i := range p.Agents {
		if p.Agents[i].GPU.Index == index {
			return &p.Agents[i]
		}
	}
	return nil
}

// ParsePlan reads a plan written by WriteJSON.
func ParsePlan(data []byte) (*Plan, error) {
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("parsing plan: %w", err)
	}
	if p.Runtime != contract.RuntimeNVIDIA && p.Runtime != contract.RuntimeROCm {
		return nil, fmt.Errorf("parsing plan: runtime %q is neither nvidia nor rocm", p.Runtime)
	}
	return &p, nil
}
