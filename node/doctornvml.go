package node

import (
	"os"
	"path/filepath"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// checkNVML reports the kbgen-nvml beside the agents' kbgen: missing is
// a warning (the noise record and node discovery fall back to
// nvidia-smi, at 72-190 ms a sample), installed but broken a failure
// (every job would pay for its failed start), working the measured cost
// of one sample, the figure the noise record adds to each timed run.
func (d *Doctor) checkNVML(p *Plan) Check {
	const name = "kbgen-nvml (NVML)"
	if d.Kbgen == "" {
		return Check{Name: name, Skipped: true, Detail: "skipped: no kbgen binary given"}
	}
	loc := nvmlhelper.Locate(contract.MapLookup(nil), d.Kbgen)
	if loc.Path == "" {
		return Check{Name: name, Skipped: true, Detail: loc.Absent + ": the noise record and node discovery use nvidia-smi (72-190 ms a sample); deployment/setup-node.sh installs it (KBGEN_NVML_BINARY)"}
	}
	h, err := nvmlhelper.Start(loc.Path, os.Environ(), 0)
	if err != nil {
		return fail(name, "%v: every job would start it, fail, and fall back to nvidia-smi; reinstall it (needs glibc 2.34+ and libnvidia-ml.so.1) or remove %s", err, loc.Path)
	}
	defer h.Close()
	inv, err := h.Inventory()
	if err != nil {
		return fail(name, "%v", err)
	}
	if want := len(planGPUs(p)); want > 0 && len(inv.GPUs) != want {
		return fail(name, "NVML sees %d GPUs, the installed plan %d: re-plan the node (kbgen node install)", len(inv.GPUs), want)
	}
	start := time.Now()
	if _, err := h.Sample(); err != nil {
		return fail(name, "%v", err)
	}
	return pass(name, "%s loads NVML (driver %s), sees %d GPUs; a sample of every GPU took %.2f ms", filepath.Base(loc.Path), h.Driver, len(inv.GPUs), float64(time.Since(start).Microseconds())/1000)
}

// planGPUs are the distinct physical GPUs the plan's agents own.
func planGPUs(p *Plan) map[string]bool {
	gpus := map[string]bool{}
	if p == nil {
		return gpus
	}
	for _, a := range p.Agents {
		for _, g := range append([]GPU{a.GPU}, a.GPUs...) {
			if g.PCIBus != "" {
				gpus[g.PCIBus] = true
			}
		}
	}
	return gpus
}
