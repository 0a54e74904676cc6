package node

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/nvmlhelper"
	"github.com/gpu-mode/kbgen/registry"
)

// Source is the machine a plan is made for (this one, or fixture files)
// and the registry it is checked against: the node commands' shared
// flags, whose names the errors use. Errors in what was given carry
// exitcode.Usage.
type Source struct {
	// Sysfs is the /sys tree; /proc/meminfo is read beside it.
	Sysfs string
	// NvidiaSMI, RocmSMI, NvidiaTopo and NvidiaList are files holding
	// those commands' output, used instead of running them ("": run).
	NvidiaSMI, RocmSMI, NvidiaTopo, NvidiaList string
	// NVMLInventory is a file holding `kbgen-nvml inventory`'s output, used
	// for whichever of those three NVIDIA files is not given.
	NVMLInventory string
	// NVML is the kbgen-nvml helper asked for the inventory on a live
	// machine (no GPU fixture given); without one, nvidia-smi runs.
	NVML         nvmlhelper.Location
	ReserveCores int
	// ReserveMemory is docker size syntax (16g).
	ReserveMemory string
	// Shapes are multi-GPU queues served besides Queue; MIGQueue the
	// queue of MIG instances.
	Shapes   []string
	MIGQueue string
	// Queue is the queue the agents serve ("": none checked).
	Queue string
	// AllowUnknownQueue keeps a Queue the registry does not list (with a
	// note) instead of refusing it.
	AllowUnknownQueue bool
	// Vendors is the vendor registry file ("": the built-in one).
	Vendors string
}

// LoadOrPlan is the plan installed under root (kbgen node install), or,
// when none is, the machine s describes planned afresh.
func LoadOrPlan(ctx context.Context, root string, s Source) (*Plan, error) {
	p, err := ReadInstalledPlan(root)
	if errors.Is(err, os.ErrNotExist) {
		return PlanSource(ctx, s)
	}
	return p, err
}

// PlanSource reads the machine s names, plans its agents and checks the
// plan's queues against the registry.
func PlanSource(ctx context.Context, s Source) (*Plan, error) {
	mem, err := size.Parse(s.ReserveMemory)
	if err != nil {
		return nil, exitcode.Usagef("--reserve-memory: %w", err)
	}
	if _, err := os.Stat(s.Sysfs); err != nil {
		return nil, exitcode.Usagef("--sysfs: %w", err)
	}
	if s.ReserveCores < 0 {
		return nil, exitcode.Usagef("--reserve-cores %d: must not be negative", s.ReserveCores)
	}
	mach, err := s.machine()
	if err != nil {
		return nil, err
	}
	reg, err := LoadRegistry(s.Vendors)
	if err != nil {
		return nil, err
	}
	shapes, err := ResolveShapes(reg, s.Shapes)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	p, err := PlanMachine(ctx, mach, PlanOptions{Queue: s.Queue, ReserveCores: s.ReserveCores, ReserveMemory: mem, Shapes: shapes, MIGQueue: s.MIGQueue})
	if err != nil {
		return nil, machineFault(fmt.Errorf("planning agents: %w", err))
	}
	if err := CheckQueue(p, reg, s.AllowUnknownQueue); err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return p, exitcode.With(exitcode.Usage, CheckAgentQueues(p, reg))
}

// machineFault is a planning error's exit code: one that already carries
// a code keeps it; otherwise the machine cannot give what the plan needs
// (no GPUs, too few cores or too little memory left after the host's
// reserve, a tool missing), a machine fault (75), never the unexpected
// error (1) that scripts are told to report as a bug.
func machineFault(err error) error {
	if _, ok := errors.AsType[exitcode.Coder](err); ok {
		return err
	}
	return exitcode.With(exitcode.TempFail, err)
}

// LoadRegistry is the vendor registry in file ("": the built-in one); a
// registry that does not load is the caller's mistake (exit 2).
func LoadRegistry(file string) (*registry.Registry, error) {
	reg, err := registry.Load(file)
	return reg, exitcode.With(exitcode.Usage, err)
}

// machine reads the files s names. /proc/meminfo is beside the /sys tree
// (/proc for /sys; DIR/../proc in a fixture); absent is fine, the NUMA
// nodes' figures then stand.
func (s Source) machine() (Machine, error) {
	mach := Machine{Sys: os.DirFS(s.Sysfs), Runner: ExecRunner{}}
	mach.MemInfo, _ = os.ReadFile(filepath.Join(filepath.Dir(filepath.Clean(s.Sysfs)), "proc", "meminfo"))
	for _, f := range []struct {
		flag, path string
		dst        *[]byte
	}{
		{"--nvidia-smi", s.NvidiaSMI, &mach.NvidiaSMI}, {"--rocm-smi", s.RocmSMI, &mach.RocmSMI},
		{"--nvidia-topo", s.NvidiaTopo, &mach.NvidiaTopo}, {"--nvidia-smi-list", s.NvidiaList, &mach.NvidiaList},
	} {
		if f.path == "" {
			continue
		}
		var err error
		if *f.dst, err = os.ReadFile(f.path); err != nil {
			return mach, exitcode.Usagef("%s: %w", f.flag, err)
		}
	}
	return mach, s.inventory(&mach)
}

// inventory fills mach's NVML inventory: the --nvml-inventory file, or
// on a live machine (no GPU fixture) the helper's answer. The helper
// failing is not an error: nvidia-smi answers instead, and the plan says
// why.
func (s Source) inventory(mach *Machine) error {
	if s.NVMLInventory != "" {
		data, err := os.ReadFile(s.NVMLInventory)
		if err != nil {
			return exitcode.Usagef("--nvml-inventory: %w", err)
		}
		var inv nvmlhelper.Inventory
		if err := json.Unmarshal(data, &inv); err != nil {
			return exitcode.Usagef("--nvml-inventory %s: not kbgen-nvml inventory output: %w", s.NVMLInventory, err)
		}
		mach.Inventory = &inv
		return nil
	}
	if s.NvidiaSMI != "" || s.RocmSMI != "" {
		return nil
	}
	if s.NVML.Path == "" {
		mach.InventoryNote = fmt.Sprintf("GPUs read with nvidia-smi: %s", cmp.Or(s.NVML.Absent, "no kbgen-nvml"))
		return nil
	}
	h, err := nvmlhelper.Start(s.NVML.Path, os.Environ(), 0)
	if err == nil {
		defer h.Close()
		mach.Inventory, err = h.Inventory()
	}
	if err != nil {
		mach.InventoryNote = fmt.Sprintf("GPUs read with nvidia-smi: %v", err)
	}
	return nil
}
