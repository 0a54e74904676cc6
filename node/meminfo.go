package node

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/size"
)

// parseMemTotal reads "MemTotal:  131941464 kB" from /proc/meminfo.
func parseMemTotal(meminfo []byte) (int64, bool) {
	for line := range strings.Lines(string(meminfo)) {
		rest, ok := strings.CutPrefix(line, "MemTotal:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, false
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		return kb * 1024, err == nil && kb > 0
	}
	return 0, false
}

// fixHotplugMemory handles memory the NUMA nodes do not account for: a
// Firecracker VM hot-plugs most of its memory outside node0 (node0's
// meminfo said 4.4 GiB of 128 GiB), which made every plan fail. When the
// nodes' memory sums to less than half of /proc/meminfo's MemTotal, the
// MemTotal is split evenly across the nodes instead, and the plan says
// so. It returns the note, or "" when the nodes' own figures stand.
func fixHotplugMemory(topo *Topology, meminfo []byte) string {
	total, ok := parseMemTotal(meminfo)
	if !ok || len(topo.Nodes) == 0 {
		return ""
	}
	var sum int64
	for _, n := range topo.Nodes {
		sum += n.MemTotal
	}
	if 2*sum >= total {
		return ""
	}
	each := total / int64(len(topo.Nodes))
	for i := range topo.Nodes {
		topo.Nodes[i].MemTotal = each
	}
	return fmt.Sprintf("the NUMA nodes' meminfo accounts for %.1f GiB of MemTotal's %.1f GiB (memory hot-plugged outside the nodes, as in a Firecracker VM): planned with MemTotal split across %d node(s), %.1f GiB each",
		float64(sum)/size.GiB, float64(total)/size.GiB, len(topo.Nodes), float64(each)/size.GiB)
}
