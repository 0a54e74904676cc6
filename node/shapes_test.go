package node

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/golden"
)

// TestShapePlansGolden: the plans of the reference machines with their
// multi-GPU shapes and MIG, in golden/node/plans/<name>.json
// (UPDATE_GOLDEN=1 rewrites them).
func TestShapePlansGolden(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, box string
		opts      func(*PlanOptions)
		// every shape agent: its GPUs and slowest link
		want map[string]string
	}{
		{"h100x8-nvswitch", "h100x8", func(o *PlanOptions) { o.Shapes = []Shape{{"nvidia-h100x8", 8}, {"h100x4", 4}} },
			map[string]string{"gpux8-0": "0,1,2,3,4,5,6,7 NVLink/NVSwitch (NV18)", "gpux4-0": "0,1,2,3 NVLink/NVSwitch (NV18)", "gpux4-1": "4,5,6,7 NVLink/NVSwitch (NV18)"}},
		{"mi300xx8-xgmi", "mi300xx8", func(o *PlanOptions) { o.Shapes = []Shape{{"amd-mi300x8", 8}} },
			map[string]string{"gpux8-0": "0,1,2,3,4,5,6,7 xGMI"}},
		{"l4x4-pcie", "l4x4", func(o *PlanOptions) { o.Shapes = []Shape{{"nvidia-l4x4", 4}, {"l4x2", 2}} },
			map[string]string{"gpux4-0": "0,1,2,3 PCIe (SYS)", "gpux2-0": "0,1 PCIe (PIX)", "gpux2-1": "2,3 PCIe (PIX)"}},
		{"h100x8-mig", "h100x8", func(o *PlanOptions) { o.MIGQueue = "nvidia-h100-mig" }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := defaultOpts
			opts.Queue = "q"
			tt.opts(&opts)
			p := planFixture(t, tt.box, opts)
			var b bytes.Buffer
			if err := p.WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("..", "golden", "node", "plans", tt.name+".json"), b.Bytes())
			got := map[string]string{}
			for _, a := range p.Agents {
				if len(a.GPUs) == 0 {
					continue
				}
				var idx []string
				for _, g := range a.GPUs {
					idx = append(idx, strconv.Itoa(g.Index))
				}
				got[a.ID] = strings.Join(idx, ",") + " " + a.Link
			}
			if len(got) != len(tt.want) {
				t.Errorf("shape agents %v, want %v", got, tt.want)
			}
			for id, w := range tt.want {
				if got[id] != w {
					t.Errorf("%s: %q, want %q", id, got[id], w)
				}
			}
		})
	}
}

// TestShapeAgentPlacement: a shape agent owns its GPUs' one-GPU agents'
// CPUs, NUMA nodes and memory together, on its own queue, and exports
// its set as lists.
func TestShapeAgentPlacement(t *testing.T) {
	t.Parallel()
	opts := defaultOpts
	opts.Shapes = []Shape{{"nvidia-h100x8", 8}}
	p := planFixture(t, "h100x8", opts)
	a := p.Agents[len(p.Agents)-1]
	if a.ID != "gpux8-0" || a.Queue != "nvidia-h100x8" || a.Unit() != "buildkite-agent-gpu@x8-0.service" {
		t.Fatalf("shape agent %s on %s (%s)", a.ID, a.Queue, a.Unit())
	}
	var mem int64
	for _, m := range p.Agents[:8] {
		mem += m.MemoryBytes
	}
	if a.MemoryBytes != mem || a.Mems != "0-1" || a.CPUSet != p.JobCPUs() {
		t.Errorf("memory %d (want %d), mems %s, cpuset %s (want %s)", a.MemoryBytes, mem, a.Mems, a.CPUSet, p.JobCPUs())
	}
	look := a.EnvLookup(contract.RuntimeNVIDIA, 2)
	uuids, _ := look(contract.EnvGPUUUID)
	if n := strings.Count(uuids, "GPU-"); n != 8 || !strings.HasPrefix(uuids, p.Agents[0].GPU.UUID+",") {
		t.Errorf("%s = %q: want the eight UUIDs", contract.EnvGPUUUID, uuids)
	}
	if idx, _ := look(contract.EnvGPUIndex); idx != "0,1,2,3,4,5,6,7" {
		t.Errorf("%s = %q", contract.EnvGPUIndex, idx)
	}
	files, err := Render(p, InstallOptions{Queue: "nvidia-h100", Hostname: "gpu-node-7"})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		switch f.Path {
		case "/etc/buildkite-agent/kbgen/gpux8-0/buildkite-agent.cfg":
			if !strings.Contains(string(f.Data), `tags="queue=nvidia-h100x8,`) {
				t.Errorf("the shape agent's config is not on its queue:\n%s", f.Data)
			}
			// Its identity tag names its eight GPUs, joined so that the
			// tag list's commas do not split them.
			if want := "," + contract.GPUsTag + "=" + strings.ReplaceAll(uuids, ",", contract.GPUsTagSep) + `"`; !strings.Contains(string(f.Data), want) {
				t.Errorf("the shape agent's config lacks %s:\n%s", want, f.Data)
			}
		case "/etc/buildkite-agent/kbgen/gpu3/buildkite-agent.cfg":
			if !strings.Contains(string(f.Data), `tags="queue=nvidia-h100,`) {
				t.Errorf("a one-GPU agent left its queue:\n%s", f.Data)
			}
		}
	}
}

// TestMIGAgents: a GPU in MIG mode gets one agent per instance, on the
// MIG queue, each with its own whole cores and a share of the memory;
// the other GPUs keep their whole-GPU agents.
func TestMIGAgents(t *testing.T) {
	t.Parallel()
	opts := defaultOpts
	opts.MIGQueue = "nvidia-h100-mig"
	p := planFixture(t, "h100x8", opts)
	var migs []Agent
	for _, a := range p.Agents {
		if strings.HasPrefix(a.GPU.UUID, "MIG-") {
			migs = append(migs, a)
		}
	}
	if len(migs) != 7 || len(p.Agents) != 14 {
		t.Fatalf("%d MIG agents of %d, want 7 of 14", len(migs), len(p.Agents))
	}
	var cpus []string
	for _, a := range migs {
		if a.Queue != "nvidia-h100-mig" || a.Cores != 1 || a.CPUs != 2 || a.GPU.Index != 0 {
			t.Errorf("%s: queue %s, %d cores, %d CPUs, GPU %d", a.ID, a.Queue, a.Cores, a.CPUs, a.GPU.Index)
		}
		if slices.Contains(cpus, a.CPUSet) {
			t.Errorf("%s shares cpuset %s", a.ID, a.CPUSet)
		}
		cpus = append(cpus, a.CPUSet)
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "7 MIG instances on 13 cores; 6 core(s) stay unused") {
		t.Errorf("notes %q", p.Notes)
	}
	if p.Agent(1) == nil || p.Agent(1).Queue != "" {
		t.Errorf("GPU 1 lost its whole-GPU agent")
	}
}

// TestChooseSets: sets stay on a fabric island or a PCIe switch when one
// holds them; they cross a slow link only when no better set exists.
func TestChooseSets(t *testing.T) {
	t.Parallel()
	// Two NVLink islands {0,1,2,3} and {4,5,6,7} joined by SYS, but the
	// islands interleaved by index, as a careless index split would break.
	island := func(g int) int { return []int{0, 1, 0, 1, 0, 1, 0, 1}[g] }
	twoIslands := func(a, b int) Link {
		if island(a) == island(b) {
			return fabricLink("NV12")
		}
		return Link{5, "SYS"}
	}
	tests := []struct {
		name  string
		gpus  []int
		n     int
		links Links
		want  [][]int
	}{
		{"islands, not index order", []int{0, 1, 2, 3, 4, 5, 6, 7}, 4, twoIslands, [][]int{{0, 2, 4, 6}, {1, 3, 5, 7}}},
		{"pairs on an island", []int{0, 1, 2, 3, 4, 5, 6, 7}, 2, twoIslands, [][]int{{0, 2}, {1, 3}, {4, 6}, {5, 7}}},
		{"one set across islands when nothing better", []int{0, 1, 2, 3, 4, 5, 6, 7}, 8, twoIslands, [][]int{{0, 1, 2, 3, 4, 5, 6, 7}}},
		{"not enough GPUs", []int{0, 1, 2}, 4, twoIslands, nil},
		{"a leftover GPU stays out", []int{0, 1, 2}, 2, twoIslands, [][]int{{0, 2}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := ChooseSets(tt.gpus, tt.n, tt.links); !slices.EqualFunc(got, tt.want, slices.Equal) {
				t.Errorf("ChooseSets = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestParseNvidiaTopoRefuses(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"empty":        "",
		"unknown link": "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X \tNVX\t0-3\nGPU1\tNVX\t X \t0-3\n",
		"short row":    "\tGPU0\tGPU1\tCPU Affinity\nGPU0\t X\n",
	} {
		if _, err := ParseNvidiaTopo([]byte(in)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// TestPlanMachineToolsMissing: shapes without nvidia-smi topo fall back to
// NUMA nodes and say so; MIG without nvidia-smi -L is an error.
func TestPlanMachineToolsMissing(t *testing.T) {
	t.Parallel()
	m := fixtureMachine(t, "l4x4")
	m.NvidiaTopo = nil
	opts := defaultOpts
	opts.Shapes = []Shape{{"l4x2", 2}}
	p, err := PlanMachine(context.Background(), m, opts)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(strings.Join(p.Notes, "\n"), "chosen by NUMA node only") {
		t.Errorf("notes %q", p.Notes)
	}
	opts = defaultOpts
	opts.MIGQueue = "nvidia-h100-mig"
	// The message is the contract: it says which output to give (nvidia-smi -L).
	if _, err := PlanMachine(context.Background(), m, opts); exitcode.Of(err) != exitcode.TempFail || !strings.Contains(err.Error(), "nvidia-smi -L") {
		t.Errorf("MIG without nvidia-smi -L: %v", err)
	}
}
