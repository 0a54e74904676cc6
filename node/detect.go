package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/gpuid"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// Runner runs a command and returns its standard output. Doctor and
// detection shell out through it so tests can replace the machine.
type Runner interface {
	Output(ctx context.Context, name string, args ...string) ([]byte, error)
}

// ExecRunner runs real commands.
type ExecRunner struct{}

// Output runs name and returns its stdout; a failure carries stderr.
func (ExecRunner) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	out, err := exec.CommandContext(ctx, name, args...).Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) && len(ee.Stderr) > 0 {
		return out, fmt.Errorf("%s: %w: %s", name, err, firstLine(ee.Stderr))
	}
	return out, err
}

func firstLine(b []byte) string {
	for i, c := range b {
		if c == '\n' {
			return string(b[:i])
		}
	}
	return string(b)
}

// Machine is what planning reads: sysfs, and the vendor tools' output
// (given as fixtures, or nil to run the tool through Runner).
type Machine struct {
	Sys fs.FS
	// MemInfo is /proc/meminfo's content (nil: not read): its MemTotal
	// stands in when the NUMA nodes' memory falls far short of it.
	MemInfo   []byte
	NvidiaSMI []byte
	RocmSMI   []byte
	// NvidiaTopo is `nvidia-smi topo -m` (multi-GPU shapes), NvidiaList
	// `nvidia-smi -L` (MIG instances); nil runs them through Runner when
	// needed.
	NvidiaTopo []byte
	NvidiaList []byte
	// Inventory is kbgen-nvml's NVML inventory: it answers for all three
	// nvidia-smi queries where their fixtures are not given. InventoryNote
	// says why there is none on an NVIDIA machine (a plan note).
	Inventory     *nvmlhelper.Inventory
	InventoryNote string
	Runner        Runner
}

// DetectGPUs finds the machine's GPUs and their runtime: NVIDIA when
// nvidia-smi output is given or nvidia-smi runs, ROCm when amdgpu devices
// are in sysfs.
func DetectGPUs(ctx context.Context, m Machine) (contract.Runtime, []GPU, error) {
	if m.NvidiaSMI != nil {
		gpus, err := ParseNvidiaSMI(m.NvidiaSMI)
		return contract.RuntimeNVIDIA, gpus, err
	}
	if m.Inventory != nil {
		gpus, err := inventoryGPUs(m.Inventory)
		return contract.RuntimeNVIDIA, gpus, err
	}
	if m.RocmSMI != nil {
		gpus, err := ReadAMDGPUs(m.Sys, m.RocmSMI)
		return contract.RuntimeROCm, gpus, err
	}
	if amd, err := ReadAMDGPUs(m.Sys, nil); err == nil {
		return contract.RuntimeROCm, amd, nil
	}
	if m.Runner == nil {
		return "", nil, fmt.Errorf("%w: no amdgpu devices in sysfs and no nvidia-smi output", ErrNoGPUs)
	}
	out, err := m.Runner.Output(ctx, "nvidia-smi", NvidiaSMIArgs...)
	if err != nil {
		return "", nil, fmt.Errorf("%w: no amdgpu devices in sysfs, and nvidia-smi failed: %w", ErrNoGPUs, err)
	}
	gpus, err := ParseNvidiaSMI(out)
	return contract.RuntimeNVIDIA, gpus, err
}

// PlanMachine detects GPUs and topology and plans the agents.
func PlanMachine(ctx context.Context, m Machine, opts PlanOptions) (*Plan, error) {
	rt, gpus, err := DetectGPUs(ctx, m)
	if err != nil {
		return nil, err
	}
	topo, err := ReadTopology(m.Sys)
	if err != nil {
		return nil, err
	}
	note := fixHotplugMemory(topo, m.MemInfo)
	if opts.CgroupVersion == 0 {
		opts.CgroupVersion = CgroupVersion(m.Sys)
	}
	p, err := MakePlan(topo, rt, gpus, func(g GPU) (int, bool, error) { return PCINUMANode(m.Sys, g.PCIBus) }, opts)
	if err != nil {
		return nil, err
	}
	if note != "" {
		p.Notes = append(p.Notes, note)
	}
	if rt == contract.RuntimeNVIDIA && m.InventoryNote != "" {
		p.Notes = append(p.Notes, m.InventoryNote)
	}
	if opts.MIGQueue != "" {
		if rt != contract.RuntimeNVIDIA {
			return nil, fmt.Errorf("MIG queue %s: MIG is NVIDIA's; this node's GPUs are %s", opts.MIGQueue, rt)
		}
		migs, err := machineMIG(ctx, m)
		if err != nil {
			return nil, err
		}
		if err := splitMIG(p, topo, migs, opts.MIGQueue); err != nil {
			return nil, err
		}
	}
	if len(opts.Shapes) > 0 {
		links, err := machineLinks(ctx, m, rt, p)
		if err != nil {
			return nil, err
		}
		if err := addShapes(p, opts.Shapes, links); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// machineMIG is each GPU's MIG instances: nvidia-smi -L's fixture, the
// NVML inventory, or nvidia-smi -L run.
func machineMIG(ctx context.Context, m Machine) (map[int][]nvsmi.MIGInstance, error) {
	if m.NvidiaList == nil && m.Inventory != nil {
		return checkMIG(inventoryMIG(m.Inventory), nil)
	}
	list, err := toolOutput(ctx, m, m.NvidiaList, NvidiaListArgs)
	if err != nil {
		return nil, exitcode.With(exitcode.TempFail, fmt.Errorf("listing MIG instances: %w (off the GPU node, give its 'nvidia-smi -L' output with --nvidia-smi-list FILE, or 'kbgen-nvml inventory' output with --nvml-inventory FILE)", err))
	}
	return checkMIG(nvsmi.ParseMIG(list))
}

// checkMIG holds every MIG instance and its parent to gpuid's grammar:
// the UUIDs become agents' placement, written into shell files.
func checkMIG(migs map[int][]nvsmi.MIGInstance, err error) (map[int][]nvsmi.MIGInstance, error) {
	if err != nil {
		return nil, err
	}
	for gpu, insts := range migs {
		for _, m := range insts {
			if err := errors.Join(gpuid.NVIDIAMIG(m.UUID), gpuid.NVIDIAGPU(m.Parent)); err != nil {
				return nil, fmt.Errorf("GPU %d's MIG instances: %w", gpu, err)
			}
		}
	}
	return migs, nil
}

// toolOutput is a fixture's content, or the nvidia-smi query run.
func toolOutput(ctx context.Context, m Machine, fixture []byte, args []string) ([]byte, error) {
	if fixture != nil {
		return fixture, nil
	}
	if m.Runner == nil {
		return nil, fmt.Errorf("no nvidia-smi %s output given", strings.Join(args, " "))
	}
	return m.Runner.Output(ctx, "nvidia-smi", args...)
}

// machineLinks is how the node's GPUs talk: nvidia-smi topo -m, or the
// KFD io_links; NUMA locality where neither says.
func machineLinks(ctx context.Context, m Machine, rt contract.Runtime, p *Plan) (Links, error) {
	if rt == contract.RuntimeROCm {
		return ReadKFDLinks(m.Sys, numaLinks(p))
	}
	if m.NvidiaTopo == nil && m.Inventory != nil {
		return inventoryLinks(m.Inventory)
	}
	out, err := toolOutput(ctx, m, m.NvidiaTopo, NvidiaTopoArgs)
	if err != nil {
		p.Notes = append(p.Notes, fmt.Sprintf("no GPU topology (%v): multi-GPU sets chosen by NUMA node only", err))
		return numaLinks(p), nil
	}
	return ParseNvidiaTopo(out)
}

// CgroupVersion is 2 when sys (a view of /sys) has the unified
// hierarchy's cgroup.controllers at fs/cgroup, else 1.
func CgroupVersion(sys fs.FS) int {
	if _, err := fs.Stat(sys, "fs/cgroup/cgroup.controllers"); err == nil {
		return 2
	}
	return 1
}
