// Package nvsmi is kbgen's one nvidia-smi reader: every query it asks
// (query.go: the node's inventory, the runner's GPU names, the clean-GPU
// check's state, compute processes and row remapper, the noise record's
// samples), their CSV (Fields, Rows, ParseApps), a PCI bus id in sysfs's
// form and as one key across nvidia-smi, sysfs and the driver's Xid
// reports (bus.go), and the GPU and MIG instance list of `nvidia-smi -L`
// (node plans one agent per instance; the sandbox checks an instance's
// parent GPU before each job).
package nvsmi

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// ListArgs is the query ParseMIG reads (`nvidia-smi -L`).
var ListArgs = []string{"-L"}

// MIGInstance is one MIG instance of a GPU, as `nvidia-smi -L` lists it.
type MIGInstance struct {
	Profile string // "1g.10gb"
	UUID    string // "MIG-…"
	// Parent is the UUID of the GPU it is a slice of ("GPU-…"): its bus,
	// ECC counters, row remapper and Xid reports are the instance's too.
	Parent string
}

var (
	migGPULine = lazyre.New(`^GPU ([0-9]+): .*\(UUID: (GPU-[0-9a-fA-F-]+)\)`)
	migLine    = lazyre.New(`^\s+MIG (\S+)\s+Device\s+[0-9]+: \(UUID: (MIG-[0-9a-fA-F-]+)\)`)
)

// ParseMIG reads `nvidia-smi -L`: each GPU line, then its MIG instances
// indented below it (a GPU without MIG lists none). The result maps a
// GPU index to its instances.
//
//	GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-5a1c…)
//	  MIG 1g.10gb     Device  0: (UUID: MIG-0e6c…)
func ParseMIG(out []byte) (map[int][]MIGInstance, error) {
	migs := map[int][]MIGInstance{}
	gpu, parent := -1, ""
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\r\n")
		if m := migGPULine.FindStringSubmatch(line); m != nil {
			gpu, _ = strconv.Atoi(m[1])
			parent = m[2]
			continue
		}
		if m := migLine.FindStringSubmatch(line); m != nil {
			if gpu < 0 {
				return nil, fmt.Errorf("nvidia-smi -L: MIG instance %s before any GPU line", m[2])
			}
			migs[gpu] = append(migs[gpu], MIGInstance{Profile: m[1], UUID: m[2], Parent: parent})
		}
	}
	return migs, nil
}
