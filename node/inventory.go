package node

import (
	"fmt"
	"slices"

	"github.com/gpu-mode/kbgen/internal/gpuid"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// The NVML inventory (kbgen-nvml, package nvmlhelper) answers what the
// three nvidia-smi queries answer, from one loaded library: the GPUs
// (--query-gpu), their MIG instances (-L) and their links (topo -m). It
// is read in the same words and checked by the same rules, so a plan made
// from either is the same plan.

// inventoryGPUs are the inventory's GPUs, checked as ParseNvidiaSMI
// checks nvidia-smi's.
func inventoryGPUs(inv *nvmlhelper.Inventory) ([]GPU, error) {
	if len(inv.GPUs) == 0 {
		return nil, noGPUsError("NVML lists no GPUs")
	}
	gpus := make([]GPU, 0, len(inv.GPUs))
	for _, d := range inv.GPUs {
		if err := gpuid.NVIDIAGPU(d.UUID); err != nil {
			return nil, fmt.Errorf("NVML GPU %d: %w", d.Index, err)
		}
		bus, err := normalizePCIBus(d.PCIBus)
		if err != nil {
			return nil, fmt.Errorf("NVML GPU %d: %w", d.Index, err)
		}
		gpus = append(gpus, GPU{Index: d.Index, UUID: d.UUID, PCIBus: bus, Model: d.Name})
	}
	slices.SortFunc(gpus, func(a, b GPU) int { return a.Index - b.Index })
	for i := 1; i < len(gpus); i++ {
		if gpus[i].Index == gpus[i-1].Index {
			return nil, fmt.Errorf("NVML lists GPU index %d twice", gpus[i].Index)
		}
	}
	return gpus, nil
}

// inventoryMIG maps a GPU index to its MIG instances, as nvsmi.ParseMIG
// does for `nvidia-smi -L`.
func inventoryMIG(inv *nvmlhelper.Inventory) map[int][]nvsmi.MIGInstance {
	migs := map[int][]nvsmi.MIGInstance{}
	for _, d := range inv.GPUs {
		for _, m := range d.MIG {
			migs[d.Index] = append(migs[d.Index], nvsmi.MIGInstance{Profile: m.Profile, UUID: m.UUID, Parent: d.UUID})
		}
	}
	return migs
}

// inventoryLinks is the inventory's link matrix as Links.
func inventoryLinks(inv *nvmlhelper.Inventory) (Links, error) {
	if len(inv.Links) != len(inv.GPUs) {
		return nil, fmt.Errorf("NVML link matrix has %d rows for %d GPUs", len(inv.Links), len(inv.GPUs))
	}
	m := map[[2]int]Link{}
	for i, row := range inv.Links {
		if len(row) != len(inv.GPUs) {
			return nil, fmt.Errorf("NVML link matrix row %d has %d columns for %d GPUs", i, len(row), len(inv.GPUs))
		}
		for j, v := range row {
			if i == j {
				continue
			}
			l, err := parseLink(v)
			if err != nil {
				return nil, fmt.Errorf("NVML GPU%d-GPU%d: %w", inv.GPUs[i].Index, inv.GPUs[j].Index, err)
			}
			m[[2]int{inv.GPUs[i].Index, inv.GPUs[j].Index}] = l
		}
	}
	return linksOf(m), nil
}
