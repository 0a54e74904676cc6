package node

import (
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/gpuid"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/size"
)

// Shape is a multi-GPU queue the node serves besides its one-GPU queue:
// agents that each own a set of GPUs GPUs (pipelinegen: resources.gpus).
type Shape struct {
	Queue string `json:"queue"`
	GPUs  int    `json:"gpus"`
}

// Link ranks how two GPUs talk, best first: a direct fabric (NVLink or
// NVSwitch "NV<n>", AMD xGMI), then PCIe by how far the path climbs
// (nvidia-smi topo -m's legend: PIX one switch, PXB several switches,
// PHB the host bridge, NODE across host bridges of one NUMA node, SYS
// across the inter-socket link).
type Link struct {
	Rank int
	Name string
}

var linkRanks = map[string]int{"PIX": 1, "PXB": 2, "PHB": 3, "NODE": 4, "SYS": 5}

// fabricLink is NVLink/NVSwitch or xGMI.
func fabricLink(name string) Link { return Link{0, name} }

// Links says how GPU a talks to GPU b (driver indexes).
type Links func(a, b int) Link

var nvLink = lazyre.New(`^NV[0-9]+$`)

// NvidiaTopoArgs is the query ParseNvidiaTopo reads (`nvidia-smi topo -m`).
var NvidiaTopoArgs = []string{"topo", "-m"}

// ParseNvidiaTopo reads `nvidia-smi topo -m`: the GPU×GPU matrix of
// connection types (X, NV<n>, PIX, PXB, PHB, NODE, SYS).
func ParseNvidiaTopo(out []byte) (Links, error) {
	text := ansi.ReplaceAllString(string(out), "")
	var cols []string
	m := map[[2]int]Link{}
	for line := range strings.Lines(text) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if cols == nil && strings.HasPrefix(f[0], "GPU") && !strings.Contains(line, " X ") && !strings.Contains(line, "\tX\t") {
			// The header: GPU0 GPU1 … NIC0 … CPU Affinity …
			for _, c := range f {
				if c == "CPU" {
					break
				}
				cols = append(cols, c)
			}
			continue
		}
		row, ok := gpuColumn(f[0])
		if !ok || cols == nil {
			continue
		}
		if len(f) < len(cols)+1 {
			return nil, fmt.Errorf("nvidia-smi topo -m: row %s has %d columns, the header %d", f[0], len(f)-1, len(cols))
		}
		for k, c := range cols {
			col, ok := gpuColumn(c)
			if !ok || col == row {
				continue
			}
			l, err := parseLink(f[1+k])
			if err != nil {
				return nil, fmt.Errorf("nvidia-smi topo -m: GPU%d-GPU%d: %w", row, col, err)
			}
			m[[2]int{row, col}] = l
		}
	}
	if len(m) == 0 {
		return nil, fmt.Errorf("nvidia-smi topo -m lists no GPU pairs")
	}
	return linksOf(m), nil
}

// parseLink reads one connection type of topo -m's legend.
func parseLink(v string) (Link, error) {
	switch {
	case nvLink.MatchString(v):
		return fabricLink(v), nil
	case linkRanks[v] > 0:
		return Link{linkRanks[v], v}, nil
	}
	return Link{}, fmt.Errorf("link %q is not one of X, NV<n>, PIX, PXB, PHB, NODE, SYS", v)
}

// linksOf answers from m, and SYS (the farthest) for a pair it lacks.
func linksOf(m map[[2]int]Link) Links {
	return func(a, b int) Link {
		if l, ok := m[[2]int{a, b}]; ok {
			return l
		}
		return Link{linkRanks["SYS"], "SYS"}
	}
}

var ansi = lazyre.New(`\x1b\[[0-9;]*m`)

func gpuColumn(s string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "GPU"))
	return n, err == nil && strings.HasPrefix(s, "GPU")
}

// kfdIOLinkXGMI is the KFD io_link type of an xGMI link
// (linux include/uapi/linux/kfd_sysfs.h HSA_IOLINK_TYPE_XGMI = 11).
const kfdIOLinkXGMI = 11

// ReadKFDLinks reads the xGMI links between AMD GPUs from the KFD
// topology (class/kfd/kfd/topology/nodes/<n>/io_links/<k>/properties:
// type, node_to); GPUs are numbered as ReadAMDGPUs numbers them. Pairs
// without xGMI fall back to numa.
func ReadKFDLinks(sys fs.FS, numa Links) (Links, error) {
	const dir = "class/kfd/kfd/topology/nodes"
	entries, err := fs.ReadDir(sys, dir)
	if err != nil {
		return nil, fmt.Errorf("reading KFD topology: %w", err)
	}
	var ids []int
	for _, e := range entries {
		if id, err := strconv.Atoi(e.Name()); err == nil {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	gpuOf := map[int]int{}
	for _, id := range ids {
		props := readProps(sys, fmt.Sprintf("%s/%d/properties", dir, id))
		if props["simd_count"] > 0 {
			gpuOf[id] = len(gpuOf)
		}
	}
	xgmi := map[[2]int]bool{}
	for id, g := range gpuOf {
		links, _ := fs.ReadDir(sys, fmt.Sprintf("%s/%d/io_links", dir, id))
		for _, l := range links {
			props := readProps(sys, fmt.Sprintf("%s/%d/io_links/%s/properties", dir, id, l.Name()))
			if to, ok := gpuOf[int(props["node_to"])]; ok && props["type"] == kfdIOLinkXGMI {
				xgmi[[2]int{g, to}] = true
			}
		}
	}
	return func(a, b int) Link {
		if xgmi[[2]int{a, b}] {
			return fabricLink("XGMI")
		}
		return numa(a, b)
	}, nil
}

func readProps(sys fs.FS, name string) map[string]int64 {
	data, _ := fs.ReadFile(sys, name)
	props := map[string]int64{}
	for line := range strings.Lines(string(data)) {
		if f := strings.Fields(line); len(f) == 2 {
			if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				props[f[0]] = v
			}
		}
	}
	return props
}

// numaLinks is what is known without a topology tool: GPUs of one NUMA
// node talk over that node's PCIe (NODE), others across sockets (SYS).
func numaLinks(p *Plan) Links {
	return func(a, b int) Link {
		x, y := p.Agent(a), p.Agent(b)
		if x != nil && y != nil && x.NUMANode == y.NUMANode {
			return Link{linkRanks["NODE"], "NODE"}
		}
		return Link{linkRanks["SYS"], "SYS"}
	}
}

// ChooseSets partitions GPUs (indexes) into as many disjoint sets of n as
// fit, each as tightly linked as possible: a set is grown from a seed by
// adding the GPU whose worst link to the set is best, and the seed whose
// set has the best worst link (then the least total) wins. So a set stays
// on one NVLink/NVSwitch or xGMI island when one holds n GPUs, and never
// takes a slow link when a set without one exists.
func ChooseSets(gpus []int, n int, links Links) [][]int {
	left := slices.Sorted(slices.Values(gpus))
	var sets [][]int
	for n > 0 && len(left) >= n {
		var best []int
		bestWorst, bestSum := 1<<30, 1<<30
		for _, seed := range left {
			set := grow(seed, left, n, links)
			worst, sum := setCost(set, links)
			if worst < bestWorst || worst == bestWorst && sum < bestSum {
				best, bestWorst, bestSum = set, worst, sum
			}
		}
		slices.Sort(best)
		sets = append(sets, best)
		left = slices.DeleteFunc(left, func(g int) bool { return slices.Contains(best, g) })
	}
	return sets
}

func grow(seed int, left []int, n int, links Links) []int {
	set := []int{seed}
	for len(set) < n {
		next, nextWorst, nextSum := -1, 1<<30, 1<<30
		for _, c := range left {
			if slices.Contains(set, c) {
				continue
			}
			worst, sum := 0, 0
			for _, m := range set {
				r := links(c, m).Rank
				worst, sum = max(worst, r), sum+r
			}
			if worst < nextWorst || worst == nextWorst && sum < nextSum {
				next, nextWorst, nextSum = c, worst, sum
			}
		}
		set = append(set, next)
	}
	return set
}

func setCost(set []int, links Links) (worst, sum int) {
	for i, a := range set {
		for _, b := range set[i+1:] {
			r := links(a, b).Rank
			worst, sum = max(worst, r), sum+r
		}
	}
	return worst, sum
}

// worstLink names the slowest link within a set.
func worstLink(set []int, links Links) string {
	w := Link{Rank: -1}
	for i, a := range set {
		for _, b := range set[i+1:] {
			if l := links(a, b); l.Rank > w.Rank {
				w = l
			}
		}
	}
	if w.Rank == 0 {
		if w.Name == "XGMI" {
			return "xGMI"
		}
		return "NVLink/NVSwitch (" + w.Name + ")"
	}
	return "PCIe (" + w.Name + ")"
}

// addShapes adds, for each shape, agents owning disjoint GPU sets chosen
// by ChooseSets. A shape agent's CPUs, NUMA nodes and memory are those
// of its GPUs' one-GPU agents together: the lease (sandbox/lease/lease.go)
// makes the two kinds take turns, so they never use them at once.
func addShapes(p *Plan, shapes []Shape, links Links) error {
	var whole []int
	for _, a := range p.Agents {
		if len(a.GPUs) == 0 && !gpuid.IsMIG(a.GPU.UUID) {
			whole = append(whole, a.GPU.Index)
		}
	}
	for _, s := range shapes {
		if s.GPUs < 2 {
			return fmt.Errorf("shape %s: %d GPUs a step; a shape has at least 2", s.Queue, s.GPUs)
		}
		sets := ChooseSets(whole, s.GPUs, links)
		if len(sets) == 0 {
			return fmt.Errorf("shape %s needs %d whole GPUs; this node has %d", s.Queue, s.GPUs, len(whole))
		}
		for k, set := range sets {
			a, err := shapeAgent(p, s, k, set)
			if err != nil {
				return err
			}
			a.Link = worstLink(set, links)
			p.Agents = append(p.Agents, a)
		}
	}
	return nil
}

func shapeAgent(p *Plan, s Shape, k int, set []int) (Agent, error) {
	a := Agent{ID: fmt.Sprintf("gpux%d-%d", s.GPUs, k), Queue: s.Queue}
	var cpus, mems cpulist.Set
	for _, i := range set {
		m := p.Agent(i)
		if m == nil {
			return a, fmt.Errorf("shape %s: GPU %d has no agent", s.Queue, i)
		}
		l, err := cpulist.Parse(m.CPUSet)
		if err != nil {
			return a, err
		}
		cpus = append(cpus, l...)
		if !slices.Contains(mems, m.NUMANode) {
			mems = append(mems, m.NUMANode)
		}
		a.GPUs = append(a.GPUs, m.GPU)
		a.Cores += m.Cores
		a.MemoryBytes += m.MemoryBytes
	}
	slices.Sort(cpus)
	slices.Sort(mems)
	a.GPU, a.NUMANode = a.GPUs[0], mems[0]
	a.CPUSet, a.CPUs, a.Mems = cpus.String(), len(cpus), mems.String()
	a.Memory = size.Bytes(a.MemoryBytes).String()
	return a, nil
}

// setEnv is a multi-GPU agent's GPU placement: the set as lists.
func (a *Agent) setEnv(rt contract.Runtime) (index, device string, visible []EnvVar) {
	var idx, uuids, nodes, hip []string
	for i, g := range a.GPUs {
		idx = append(idx, strconv.Itoa(g.Index))
		uuids = append(uuids, g.UUID)
		nodes = append(nodes, g.RenderNode)
		hip = append(hip, strconv.Itoa(i))
	}
	if rt == contract.RuntimeROCm {
		rocr := strings.Join(idx, ",")
		if !slices.Contains(uuids, "") {
			rocr = strings.Join(uuids, ",")
		}
		return strings.Join(idx, ","), strings.Join(nodes, ","),
			[]EnvVar{{"ROCR_VISIBLE_DEVICES", rocr}, {"HIP_VISIBLE_DEVICES", strings.Join(hip, ",")}}
	}
	u := strings.Join(uuids, ",")
	return strings.Join(idx, ","), u, []EnvVar{{"NVIDIA_VISIBLE_DEVICES", u}, {"CUDA_VISIBLE_DEVICES", u}}
}
