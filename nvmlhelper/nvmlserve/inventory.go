package nvmlserve

import (
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// inventory lists every GPU, its MIG instances, and each pair's link.
func (s *handler) inventory() (*nvmlhelper.Inventory, error) {
	devs, err := s.devices(nil)
	if err != nil {
		return nil, err
	}
	inv := &nvmlhelper.Inventory{GPUs: make([]nvmlhelper.Device, len(devs))}
	inv.Driver, _ = s.lib.SystemGetDriverVersion()
	fabric := make([]nvlinks, len(devs))
	for i, d := range devs {
		if inv.GPUs[i], err = describe(i, d); err != nil {
			return nil, err
		}
		fabric[i] = readNVLinks(d)
	}
	inv.Links = make([][]string, len(devs))
	for i := range devs {
		inv.Links[i] = make([]string, len(devs))
		for j := range devs {
			inv.Links[i][j] = link(devs[i], devs[j], fabric[i], fabric[j], inv.GPUs[j].PCIBus, i == j)
		}
	}
	return inv, nil
}

// describe is one GPU's entry.
func describe(i int, d nvml.Device) (nvmlhelper.Device, error) {
	out := nvmlhelper.Device{Index: i}
	var ret nvml.Return
	if idx, ret := d.GetIndex(); ret == nvml.SUCCESS {
		out.Index = idx
	}
	if out.UUID, ret = d.GetUUID(); ret != nvml.SUCCESS {
		return out, fmt.Errorf("GPU %d: its UUID: %v", i, ret)
	}
	pci, ret := d.GetPciInfo()
	if ret != nvml.SUCCESS {
		return out, fmt.Errorf("GPU %d: its PCI address: %v", i, ret)
	}
	out.PCIBus = busID(pci)
	out.Name, _ = d.GetName()
	out.MIG = migDevices(d)
	return out, nil
}

// migDevices are a GPU's MIG instances when MIG mode is on.
func migDevices(d nvml.Device) []nvmlhelper.MIGDevice {
	current, _, ret := d.GetMigMode()
	if ret != nvml.SUCCESS || current != nvml.DEVICE_MIG_ENABLE {
		return nil
	}
	n, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil
	}
	var out []nvmlhelper.MIGDevice
	for k := range n {
		m, ret := d.GetMigDeviceHandleByIndex(k)
		if ret != nvml.SUCCESS {
			continue // NOT_FOUND: no instance in that slot
		}
		uuid, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		name, _ := m.GetName()
		out = append(out, nvmlhelper.MIGDevice{Profile: migProfile(name), UUID: uuid})
	}
	return out
}

// migProfile is the profile at the end of a MIG device's name
// ("NVIDIA H100 80GB HBM3 MIG 1g.10gb" is "1g.10gb").
func migProfile(name string) string {
	if _, p, ok := strings.Cut(name, " MIG "); ok {
		return strings.TrimSpace(p)
	}
	return name
}

// nvlinks is what a GPU's active NVLinks reach: other GPUs by PCI bus
// id, or NVSwitches.
type nvlinks struct {
	toGPU    map[string]int
	toSwitch int
}

// readNVLinks walks a GPU's links until the driver says there are no
// more (a GPU without NVLink answers NOT_SUPPORTED at link 0).
func readNVLinks(d nvml.Device) nvlinks {
	out := nvlinks{toGPU: map[string]int{}}
	for l := range nvml.NVLINK_MAX_LINKS {
		state, ret := d.GetNvLinkState(l)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			break
		}
		if ret != nvml.SUCCESS || state != nvml.FEATURE_ENABLED {
			continue
		}
		if t, ret := d.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS && t == nvml.NVLINK_DEVICE_TYPE_SWITCH {
			out.toSwitch++
			continue
		}
		if pci, ret := d.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
			out.toGPU[strings.ToLower(busID(pci))]++
		}
	}
	return out
}

// link names how a talks to b as `nvidia-smi topo -m` does: NV<n> over n
// direct NVLinks, or through NVSwitches (the fewer of the two GPUs'
// switch links), else by the PCIe tree's nearest common ancestor.
func link(a, b nvml.Device, la, lb nvlinks, busB string, self bool) string {
	if self {
		return "X"
	}
	if n := la.toGPU[strings.ToLower(busB)]; n > 0 {
		return fmt.Sprintf("NV%d", n)
	}
	if n := min(la.toSwitch, lb.toSwitch); n > 0 {
		return fmt.Sprintf("NV%d", n)
	}
	level, ret := a.GetTopologyCommonAncestor(b)
	if ret != nvml.SUCCESS {
		return "SYS" // unknown: assume the farthest
	}
	switch level {
	case nvml.TOPOLOGY_INTERNAL, nvml.TOPOLOGY_SINGLE:
		return "PIX"
	case nvml.TOPOLOGY_MULTIPLE:
		return "PXB"
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return "PHB"
	case nvml.TOPOLOGY_NODE:
		return "NODE"
	default:
		return "SYS"
	}
}
