package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// noNvidiaSMI fails every command: a plan from the inventory must not
// run nvidia-smi.
type noNvidiaSMI struct{}

func (noNvidiaSMI) Output(_ context.Context, name string, _ ...string) ([]byte, error) {
	return nil, errors.New(name + " must not run: the NVML inventory answers")
}

func readInventory(t *testing.T, box string) *nvmlhelper.Inventory {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", box, "nvml-inventory.json"))
	if err != nil {
		t.Fatal(err)
	}
	var inv nvmlhelper.Inventory
	if err := json.Unmarshal(data, &inv); err != nil {
		t.Fatal(err)
	}
	return &inv
}

// TestPlanFromNVMLInventory: the reference machines planned from the
// NVML inventory alone are the golden plans made from nvidia-smi's three
// outputs: GPUs, MIG instances and topology read the same way.
func TestPlanFromNVMLInventory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		golden, box string
		opts        func(*PlanOptions)
	}{
		{"h100x8-nvswitch", "h100x8", func(o *PlanOptions) { o.Shapes = []Shape{{"nvidia-h100x8", 8}, {"h100x4", 4}} }},
		{"h100x8-mig", "h100x8", func(o *PlanOptions) { o.MIGQueue = "nvidia-h100-mig" }},
		{"l4x4-pcie", "l4x4", func(o *PlanOptions) { o.Shapes = []Shape{{"nvidia-l4x4", 4}, {"l4x2", 2}} }},
	}
	for _, tc := range tests {
		t.Run(tc.golden, func(t *testing.T) {
			t.Parallel()
			m := fixtureMachine(t, tc.box)
			m.NvidiaSMI, m.NvidiaTopo, m.NvidiaList = nil, nil, nil
			m.Inventory, m.Runner = readInventory(t, tc.box), noNvidiaSMI{}
			opts := defaultOpts
			tc.opts(&opts)
			p, err := PlanMachine(context.Background(), m, opts)
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := p.WriteJSON(&got); err != nil {
				t.Fatal(err)
			}
			want, err := os.ReadFile(filepath.Join("..", "golden", "node", "plans", tc.golden+".json"))
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(string(want), got.String()); d != "" {
				t.Errorf("plan from the NVML inventory differs from nvidia-smi's (-nvidia-smi +nvml):\n%s", d)
			}
		})
	}
}

func TestInventoryRefusals(t *testing.T) {
	t.Parallel()
	// want is text only for what has no kind: the message is the
	// contract, it says what in NVML's answer is wrong.
	tests := []struct {
		name string
		edit func(*nvmlhelper.Inventory)
		kind func(error) bool
		want string
	}{
		{"no GPUs", func(inv *nvmlhelper.Inventory) { inv.GPUs, inv.Links = nil, nil }, isErr(ErrNoGPUs), ""},
		{"not a GPU UUID", func(inv *nvmlhelper.Inventory) { inv.GPUs[1].UUID = "MIG-1" }, badID("NVIDIA GPU uuid", "MIG-1"), "NVML GPU 1:"},
		{"bad bus", func(inv *nvmlhelper.Inventory) { inv.GPUs[2].PCIBus = "18:00" }, isErr(nvsmi.ErrBusID), "NVML GPU 2:"},
		{"an index twice", func(inv *nvmlhelper.Inventory) { inv.GPUs[3].Index = 2 }, notNil, "NVML lists GPU index 2 twice"},
		{"short matrix", func(inv *nvmlhelper.Inventory) { inv.Links = inv.Links[:3] }, notNil, "NVML link matrix has 3 rows for 4 GPUs"},
		{"unknown link", func(inv *nvmlhelper.Inventory) { inv.Links[0][1] = "XGMI" }, notNil, `NVML GPU0-GPU1: link "XGMI" is not one of`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := fixtureMachine(t, "l4x4")
			m.NvidiaSMI, m.NvidiaTopo = nil, nil
			m.Inventory, m.Runner = readInventory(t, "l4x4"), noNvidiaSMI{}
			tc.edit(m.Inventory)
			opts := defaultOpts
			opts.Shapes = []Shape{{"nvidia-l4x4", 4}}
			_, err := PlanMachine(context.Background(), m, opts)
			if !tc.kind(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v (%T): not the refusal wanted (saying %q)", err, err, tc.want)
			}
		})
	}
}

// --nvml-inventory reads the helper's output; a file that is not is the
// caller's mistake (exit 2). On a live machine without the helper the
// plan says the GPUs were read with nvidia-smi, and why.
func TestSourceInventory(t *testing.T) {
	t.Parallel()
	bad := filepath.Join(t.TempDir(), "inv.json")
	if err := os.WriteFile(bad, []byte("GPU 0: NVIDIA L4"), 0o644); err != nil {
		t.Fatal(err)
	}
	src := Source{Sysfs: "testdata/l4x4/sys", NVMLInventory: bad}
	var mach Machine
	err := src.inventory(&mach)
	// The message is the contract: it names the flag and what its file is not.
	if exitcode.Of(err) != exitcode.Usage || !errors.As(err, new(*json.SyntaxError)) || !strings.Contains(err.Error(), "--nvml-inventory "+bad+": not kbgen-nvml inventory output") {
		t.Errorf("a bad inventory file: %v (exit %d), want a usage error", err, exitcode.Of(err))
	}
	src.NVMLInventory = "testdata/l4x4/nvml-inventory.json"
	if err := src.inventory(&mach); err != nil || mach.Inventory == nil || len(mach.Inventory.GPUs) != 4 {
		t.Errorf("the fixture inventory: %v, %+v", err, mach.Inventory)
	}
	live := Source{Sysfs: "testdata/l4x4/sys", NVML: nvmlhelper.Location{Absent: "no kbgen-nvml beside kbgen (/usr/local/bin)"}}
	mach = Machine{}
	if err := live.inventory(&mach); err != nil || mach.InventoryNote != "GPUs read with nvidia-smi: no kbgen-nvml beside kbgen (/usr/local/bin)" {
		t.Errorf("live without a helper: %v, note %q", err, mach.InventoryNote)
	}
}

// missingNvidiaSMI is a machine without nvidia-smi (off a GPU node).
type missingNvidiaSMI struct{}

func (missingNvidiaSMI) Output(_ context.Context, name string, _ ...string) ([]byte, error) {
	return nil, &exec.Error{Name: name, Err: exec.ErrNotFound}
}

// TestMIGWithoutNvidiaSMI: --mig-queue off a node, with no nvidia-smi -L
// to run, names the flag that gives its output and is a machine fault
// (75), not the unexpected error (1).
func TestMIGWithoutNvidiaSMI(t *testing.T) {
	t.Parallel()
	m := fixtureMachine(t, "h100x8")
	m.NvidiaList, m.Inventory, m.Runner = nil, nil, missingNvidiaSMI{}
	opts := defaultOpts
	opts.MIGQueue = "nvidia-h100-mig"
	_, err := PlanMachine(context.Background(), m, opts)
	// The message is the contract: it names the flag that gives the output.
	if !errors.Is(err, exec.ErrNotFound) || !strings.Contains(err.Error(), "--nvidia-smi-list") || exitcode.Of(err) != exitcode.TempFail {
		t.Fatalf("err = %v (exit %d); want exit 75 naming --nvidia-smi-list", err, exitcode.Of(err))
	}
}

func notNil(err error) bool { return err != nil }
