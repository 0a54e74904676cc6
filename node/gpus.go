package node

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/gpuid"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
)

// GPU is one GPU as the agent that owns it must name it.
type GPU struct {
	// Index is the driver's index (nvidia-smi's, or ROCm's KFD order).
	Index int    `json:"index"`
	Model string `json:"model"`
	// UUID is NVIDIA's "GPU-…" UUID, or ROCm's "GPU-<unique id>" when the
	// driver reports one.
	UUID string `json:"uuid,omitempty"`
	// PCIBus is the sysfs PCI address, "0000:18:00.0".
	PCIBus string `json:"pci_bus"`
	// RenderNode is the AMD GPU's DRM render node, "/dev/dri/renderD128".
	RenderNode string `json:"render_node,omitempty"`
}

// NvidiaSMIArgs is the query whose CSV output ParseNvidiaSMI reads; vendors
// run the same command to make a --nvidia-smi fixture.
var NvidiaSMIArgs = nvsmi.InventoryArgs

// ParseNvidiaSMI parses `nvidia-smi --query-gpu=index,uuid,pci.bus_id,name
// --format=csv,noheader` output.
func ParseNvidiaSMI(out []byte) ([]GPU, error) {
	var gpus []GPU
	for i, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ",", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("nvidia-smi output line %d: want 4 fields (index, uuid, pci.bus_id, name), got %q", i+1, line)
		}
		for j := range f {
			f[j] = strings.TrimSpace(f[j])
		}
		idx, err := strconv.Atoi(f[0])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi output line %d: index %q is not a number", i+1, f[0])
		}
		if err := gpuid.NVIDIAGPU(f[1]); err != nil {
			return nil, fmt.Errorf("nvidia-smi output line %d: %w", i+1, err)
		}
		bus, err := normalizePCIBus(f[2])
		if err != nil {
			return nil, fmt.Errorf("nvidia-smi output line %d: %w", i+1, err)
		}
		gpus = append(gpus, GPU{Index: idx, UUID: f[1], PCIBus: bus, Model: f[3]})
	}
	if len(gpus) == 0 {
		return nil, noGPUsError("nvidia-smi lists no GPUs")
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	for i := 1; i < len(gpus); i++ {
		if gpus[i].Index == gpus[i-1].Index {
			return nil, fmt.Errorf("nvidia-smi lists GPU index %d twice", gpus[i].Index)
		}
	}
	return gpus, nil
}

// normalizePCIBus is nvsmi.BusID, a bad one being bad input (exit 2)
// whichever file or tool it came from.
func normalizePCIBus(s string) (string, error) {
	bus, err := nvsmi.BusID(s)
	if err != nil {
		return "", exitcode.With(exitcode.Usage, err)
	}
	return bus, nil
}

// amdModels names the Instinct parts by PCI device id when rocm-smi output
// is not given.
var amdModels = map[string]string{
	"0x740c": "AMD Instinct MI250X/MI250",
	"0x740f": "AMD Instinct MI210",
	"0x74a1": "AMD Instinct MI300X",
	"0x74a2": "AMD Instinct MI308X",
	"0x74a5": "AMD Instinct MI325X",
	"0x74b5": "AMD Instinct MI300X VF",
	"0x75a3": "AMD Instinct MI355X",
}

// ReadAMDGPUs finds the amdgpu devices in sys. The index order is ROCm's:
// the GPU nodes of the KFD topology (which ROCR_VISIBLE_DEVICES counts), or,
// without KFD, render nodes ordered by PCI address. rocmSMI, when not nil,
// is `rocm-smi --showbus --showproductname --showuniqueid --json` output,
// used for model names and unique ids.
func ReadAMDGPUs(sys fs.FS, rocmSMI []byte) ([]GPU, error) {
	gpus, err := readKFDGPUs(sys)
	if err != nil {
		return nil, err
	}
	if gpus == nil {
		if gpus, err = readDRMRenderGPUs(sys); err != nil {
			return nil, err
		}
	}
	if len(gpus) == 0 {
		return nil, errors.New("no amdgpu render nodes under class/drm (is the amdgpu driver loaded?)")
	}
	info := map[string]rocmSMICard{}
	if rocmSMI != nil {
		if info, err = parseRocmSMI(rocmSMI); err != nil {
			return nil, err
		}
	}
	for i := range gpus {
		g := &gpus[i]
		devID, _ := fs.ReadFile(sys, "bus/pci/devices/"+g.PCIBus+"/device")
		if m, ok := amdModels[strings.TrimSpace(string(devID))]; ok {
			g.Model = m
		}
		if c, ok := info[g.PCIBus]; ok {
			if c.Model != "" {
				g.Model = c.Model
			}
			// rocm-smi says "N/A" where it cannot read the id: the GPU
			// is then named by index, as without rocm-smi.
			if u := "GPU-" + strings.TrimPrefix(strings.ToLower(c.UniqueID), "0x"); g.UUID == "" && gpuid.AMD(u) == nil {
				g.UUID = u
			}
		}
		if g.Model == "" {
			g.Model = "AMD GPU " + strings.TrimSpace(string(devID))
		}
	}
	return gpus, nil
}

// readKFDGPUs reads class/kfd/kfd/topology/nodes; nil, nil when absent.
func readKFDGPUs(sys fs.FS) ([]GPU, error) {
	const dir = "class/kfd/kfd/topology/nodes"
	entries, err := fs.ReadDir(sys, dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading KFD topology: %w", err)
	}
	type kfdNode struct {
		id    int
		props map[string]int64
	}
	var nodes []kfdNode
	for _, e := range entries {
		id, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := fs.ReadFile(sys, dir+"/"+e.Name()+"/properties")
		if err != nil {
			return nil, fmt.Errorf("reading KFD node %d: %w", id, err)
		}
		props := map[string]int64{}
		for line := range strings.Lines(string(data)) {
			f := strings.Fields(line)
			if len(f) == 2 {
				if v, err := strconv.ParseInt(f[1], 10, 64); err == nil {
					props[f[0]] = v
				}
			}
		}
		nodes = append(nodes, kfdNode{id, props})
	}
	slices.SortFunc(nodes, func(a, b kfdNode) int { return a.id - b.id })
	var gpus []GPU
	for _, n := range nodes {
		// CPU nodes have no SIMDs; only GPU nodes count for ROCR_VISIBLE_DEVICES.
		if n.props["simd_count"] == 0 {
			continue
		}
		minor, ok := n.props["drm_render_minor"]
		if !ok {
			return nil, fmt.Errorf("KFD node %d has no drm_render_minor", n.id)
		}
		loc := n.props["location_id"]
		g := GPU{
			Index:      len(gpus),
			PCIBus:     fmt.Sprintf("%04x:%02x:%02x.%x", n.props["domain"], loc>>8, (loc>>3)&0x1f, loc&7),
			RenderNode: fmt.Sprintf("/dev/dri/renderD%d", minor),
		}
		if u := n.props["unique_id"]; u != 0 {
			g.UUID = fmt.Sprintf("GPU-%016x", uint64(u))
		}
		gpus = append(gpus, g)
	}
	return gpus, nil
}

// readDRMRenderGPUs lists amdgpu render nodes ordered by PCI address.
func readDRMRenderGPUs(sys fs.FS) ([]GPU, error) {
	entries, err := fs.ReadDir(sys, "class/drm")
	if err != nil {
		return nil, fmt.Errorf("reading DRM devices: %w", err)
	}
	var gpus []GPU
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "renderD") {
			continue
		}
		uevent, err := fs.ReadFile(sys, "class/drm/"+e.Name()+"/device/uevent")
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", e.Name(), err)
		}
		kv := parseUevent(string(uevent))
		if kv["DRIVER"] != "amdgpu" {
			continue
		}
		gpus = append(gpus, GPU{PCIBus: strings.ToLower(kv["PCI_SLOT_NAME"]), RenderNode: "/dev/dri/" + e.Name()})
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return strings.Compare(a.PCIBus, b.PCIBus) })
	for i := range gpus {
		gpus[i].Index = i
	}
	return gpus, nil
}

func parseUevent(s string) map[string]string {
	kv := map[string]string{}
	for line := range strings.Lines(s) {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), "="); ok {
			kv[k] = v
		}
	}
	return kv
}

type rocmSMICard struct {
	Model, UniqueID string
}

// parseRocmSMI reads rocm-smi's --json output, keyed by PCI bus.
func parseRocmSMI(data []byte) (map[string]rocmSMICard, error) {
	var raw map[string]map[string]string
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("parsing rocm-smi JSON: %w", err)
	}
	out := map[string]rocmSMICard{}
	for card, v := range raw {
		if !strings.HasPrefix(card, "card") {
			continue
		}
		bus := strings.ToLower(v["PCI Bus"])
		if bus == "" {
			return nil, fmt.Errorf("rocm-smi JSON: %s has no \"PCI Bus\" (run rocm-smi --showbus --showproductname --showuniqueid --json)", card)
		}
		c := rocmSMICard{UniqueID: v["Unique ID"], Model: v["Card Series"]}
		if c.Model == "" {
			c.Model = v["Card SKU"]
		}
		out[bus] = c
	}
	return out, nil
}

// PCINUMANode is the NUMA node of a PCI device, from
// bus/pci/devices/<bus>/numa_node. ok is false when the firmware does not
// say (-1, common on single-socket machines and VMs).
func PCINUMANode(sys fs.FS, bus string) (node int, ok bool, err error) {
	data, err := fs.ReadFile(sys, "bus/pci/devices/"+bus+"/numa_node")
	if err != nil {
		return 0, false, fmt.Errorf("reading NUMA node of GPU %s: %w", bus, err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, false, fmt.Errorf("reading NUMA node of GPU %s: %q is not a number", bus, data)
	}
	if n < 0 {
		return 0, false, nil
	}
	return n, true, nil
}
