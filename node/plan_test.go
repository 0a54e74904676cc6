package node

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/size"
)

func fixtureMachine(t *testing.T, box string) Machine {
	t.Helper()
	m := Machine{Sys: os.DirFS("testdata/" + box + "/sys")}
	if data, err := os.ReadFile("testdata/" + box + "/nvidia-smi.csv"); err == nil {
		m.NvidiaSMI = data
	}
	if data, err := os.ReadFile("testdata/" + box + "/rocm-smi.json"); err == nil {
		m.RocmSMI = data
	}
	if data, err := os.ReadFile("testdata/" + box + "/proc/meminfo"); err == nil {
		m.MemInfo = data
	}
	if data, err := os.ReadFile("testdata/" + box + "/nvidia-smi-topo.txt"); err == nil {
		m.NvidiaTopo = data
	}
	if data, err := os.ReadFile("testdata/" + box + "/nvidia-smi-mig.txt"); err == nil {
		m.NvidiaList = data
	}
	return m
}

// TestHotplugMemoryFallsBackToMemTotal: a Firecracker VM's node0 meminfo
// says 4.4 GiB of its 128 GiB (the rest hot-plugged outside the node), so
// the default 16 GiB reservation failed every plan there.
func TestHotplugMemoryFallsBackToMemTotal(t *testing.T) {
	t.Parallel()
	p := planFixture(t, "vm-hotplug", defaultOpts)
	if len(p.Agents) != 2 || p.Agents[0].Memory != p.Agents[1].Memory || p.Agents[0].Memory == "" {
		t.Fatalf("agents %+v", p.Agents)
	}
	if got := strings.Join(p.Notes, "\n"); !strings.Contains(got, "4.4 GiB of MemTotal's 125.8 GiB") || !strings.Contains(got, "split across 1 node") {
		t.Errorf("notes %q: want the fallback explained", got)
	}
	// Without /proc/meminfo the node's own figure stands, and fails.
	m := fixtureMachine(t, "vm-hotplug")
	m.MemInfo = nil
	// The figure in the message is the node's own (4 GiB), not MemTotal's.
	if _, err := PlanMachine(context.Background(), m, defaultOpts); !errors.Is(err, ErrTooLittleMemory) || !strings.Contains(err.Error(), "NUMA node 0 has 4 GiB") {
		t.Errorf("without meminfo: %v", err)
	}
	// A machine whose nodes account for their memory keeps their figures.
	if p := planFixture(t, "l40sx2", defaultOpts); strings.Contains(strings.Join(p.Notes, ""), "MemTotal") {
		t.Errorf("l40sx2 notes %q", p.Notes)
	}
}

func planFixture(t *testing.T, box string, opts PlanOptions) *Plan {
	t.Helper()
	p, err := PlanMachine(context.Background(), fixtureMachine(t, box), opts)
	if err != nil {
		t.Fatalf("planning %s: %v", box, err)
	}
	return p
}

var defaultOpts = PlanOptions{Queue: "q", ReserveCores: DefaultReserveCores, ReserveMemory: DefaultReserveMemory}

func TestPlanFixtures(t *testing.T) {
	t.Parallel()
	type row struct {
		id, dev, cpuset, mems, memory string
		cpus                          int
	}
	tests := []struct {
		box     string
		runtime contract.Runtime
		agents  []row
		host    string
		notes   int
	}{
		{
			box: "h100x8", runtime: contract.RuntimeNVIDIA,
			// 56 cores per node, 1 for housekeeping, 55/4 = 13 cores each, 3 left
			// over (the host's too);
			// (1007.5 GiB - 16 GiB) / 4 = 247.9 GiB, rounded down.
			agents: []row{
				{"gpu0", "GPU-5a1c0000-4c1e-2f6a-9d0b-e3f1a2b40000", "1-13,113-125", "0", "247g", 26},
				{"gpu1", "GPU-5a1c1111-4c1e-2f6a-9d0b-e3f1a2b40001", "14-26,126-138", "0", "247g", 26},
				{"gpu2", "GPU-5a1c2222-4c1e-2f6a-9d0b-e3f1a2b40002", "27-39,139-151", "0", "247g", 26},
				{"gpu3", "GPU-5a1c3333-4c1e-2f6a-9d0b-e3f1a2b40003", "40-52,152-164", "0", "247g", 26},
				{"gpu4", "GPU-5a1c4444-4c1e-2f6a-9d0b-e3f1a2b40004", "57-69,169-181", "1", "247g", 26},
				{"gpu5", "GPU-5a1c5555-4c1e-2f6a-9d0b-e3f1a2b40005", "70-82,182-194", "1", "247g", 26},
				{"gpu6", "GPU-5a1c6666-4c1e-2f6a-9d0b-e3f1a2b40006", "83-95,195-207", "1", "247g", 26},
				{"gpu7", "GPU-5a1c7777-4c1e-2f6a-9d0b-e3f1a2b40007", "96-108,208-220", "1", "247g", 26},
			},
			host: "0,53-56,109-112,165-168,221-223",
		},
		{
			box: "l40sx2", runtime: contract.RuntimeNVIDIA,
			// 8 cores, 1 for housekeeping, 3 each, 1 left over; 269 GiB - 16 GiB = 253 / 2.
			agents: []row{
				{"gpu0", "GPU-9c3e0000-77aa-1c2d-8e9f-0b1d2c3e0000", "1-3,9-11", "0", "126g", 6},
				{"gpu1", "GPU-9c3e2222-77aa-1c2d-8e9f-0b1d2c3e0001", "4-6,12-14", "0", "126g", 6},
			},
			host:  "0,7-8,15",
			notes: 2,
		},
		{
			box: "mi300xx8", runtime: contract.RuntimeROCm,
			agents: []row{
				{"gpu0", "/dev/dri/renderD128", "1-23,193-215", "0", "373g", 46},
				{"gpu1", "/dev/dri/renderD129", "24-46,216-238", "0", "373g", 46},
				{"gpu2", "/dev/dri/renderD130", "47-69,239-261", "0", "373g", 46},
				{"gpu3", "/dev/dri/renderD131", "70-92,262-284", "0", "373g", 46},
				{"gpu4", "/dev/dri/renderD132", "97-119,289-311", "1", "373g", 46},
				{"gpu5", "/dev/dri/renderD133", "120-142,312-334", "1", "373g", 46},
				{"gpu6", "/dev/dri/renderD134", "143-165,335-357", "1", "373g", 46},
				{"gpu7", "/dev/dri/renderD135", "166-188,358-380", "1", "373g", 46},
			},
			host: "0,93-96,189-192,285-288,381-383",
		},
	}
	for _, tt := range tests {
		t.Run(tt.box, func(t *testing.T) {
			t.Parallel()
			p := planFixture(t, tt.box, defaultOpts)
			if p.Runtime != tt.runtime {
				t.Errorf("runtime = %q, want %q", p.Runtime, tt.runtime)
			}
			var got []row
			for _, a := range p.Agents {
				dev := a.GPU.UUID
				if p.Runtime == contract.RuntimeROCm {
					dev = a.GPU.RenderNode
				}
				got = append(got, row{a.ID, dev, a.CPUSet, a.Mems, a.Memory, a.CPUs})
			}
			if !slices.Equal(got, tt.agents) {
				t.Errorf("agents:\n got %v\nwant %v", got, tt.agents)
			}
			if p.HostCPUs != tt.host {
				t.Errorf("host CPUs = %q, want %q", p.HostCPUs, tt.host)
			}
			if len(p.Notes) != tt.notes {
				t.Errorf("notes = %q, want %d", p.Notes, tt.notes)
			}
			checkIsolated(t, p)
		})
	}
}

// checkIsolated asserts the invariants every plan must keep: no CPU owned
// twice, none shared with the host, every SMT core whole.
func checkIsolated(t *testing.T, p *Plan) {
	t.Helper()
	owner := map[int]string{}
	host, _ := cpulist.Parse(p.HostCPUs)
	for _, c := range host {
		owner[c] = "host"
	}
	for _, a := range p.Agents {
		cpus, err := cpulist.Parse(a.CPUSet)
		if err != nil {
			t.Fatal(err)
		}
		if len(cpus) != a.CPUs || len(cpus) == 0 {
			t.Errorf("%s: cpuset %s has %d CPUs, plan says %d", a.ID, a.CPUSet, len(cpus), a.CPUs)
		}
		for _, c := range cpus {
			if o, ok := owner[c]; ok {
				t.Errorf("CPU %d owned by both %s and %s", c, o, a.ID)
			}
			owner[c] = a.ID
		}
	}
}

func TestPlanAMDWithoutKFDOrRocmSMI(t *testing.T) {
	t.Parallel()
	// Without the KFD topology, render nodes in PCI order give the same plan.
	sys := fstest.MapFS{}
	base := os.DirFS("testdata/mi300xx8/sys")
	err := fsWalkCopy(base, sys, func(p string) bool { return !strings.HasPrefix(p, "class/kfd") })
	if err != nil {
		t.Fatal(err)
	}
	p, err := PlanMachine(context.Background(), Machine{Sys: sys}, defaultOpts)
	if err != nil {
		t.Fatal(err)
	}
	want := planFixture(t, "mi300xx8", defaultOpts)
	for i, a := range p.Agents {
		w := want.Agents[i]
		if a.GPU.RenderNode != w.GPU.RenderNode || a.CPUSet != w.CPUSet || a.GPU.PCIBus != w.GPU.PCIBus {
			t.Errorf("agent %d: got %+v, want %+v", i, a, w)
		}
		if a.GPU.Model != "AMD Instinct MI300X" {
			t.Errorf("agent %d model = %q, want the PCI id's name", i, a.GPU.Model)
		}
		if a.GPU.UUID != "" {
			t.Errorf("agent %d UUID = %q without KFD or rocm-smi", i, a.GPU.UUID)
		}
	}
	if want.Agents[1].GPU.UUID != "GPU-18f68e602b8a71f3" || want.Agents[1].GPU.Model != "AMD Instinct MI300X OAM" {
		t.Errorf("rocm-smi/KFD identity of gpu1 = %q %q", want.Agents[1].GPU.UUID, want.Agents[1].GPU.Model)
	}
}

func TestPlanRefusals(t *testing.T) {
	t.Parallel()
	// want is text as well as is: the message is the contract, it gives
	// the operator the figures and what to lower.
	tests := []struct {
		name string
		opts PlanOptions
		want string
		is   error
	}{
		{"too few cores", PlanOptions{ReserveCores: 7, ReserveMemory: size.GiB}, "NUMA node 0 has 8 cores, 7 reserved for the host, for 2 GPUs", ErrTooFewCores},
		{"reserve everything", PlanOptions{ReserveCores: 9, ReserveMemory: size.GiB}, "8 reserved for the host", ErrTooFewCores},
		{"no memory left", PlanOptions{ReserveCores: 1, ReserveMemory: 268 * size.GiB}, "less than 1 GiB each", ErrTooLittleMemory},
		{"negative", PlanOptions{ReserveCores: -1}, "must not be negative", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := PlanMachine(context.Background(), fixtureMachine(t, "l40sx2"), tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err = %v, want errors.Is %v", err, tt.is)
			}
		})
	}
}

func TestPlanNoSMTAndGPUlessNode(t *testing.T) {
	t.Parallel()
	// Two nodes, no SMT files, one GPU on node 1; node 0 is all host.
	sys := fstest.MapFS{
		"devices/system/node/node0/cpulist":      {Data: []byte("0-3\n")},
		"devices/system/node/node0/meminfo":      {Data: []byte("Node 0 MemTotal: 33554432 kB\n")},
		"devices/system/node/node1/cpulist":      {Data: []byte("4-7\n")},
		"devices/system/node/node1/meminfo":      {Data: []byte("Node 1 MemTotal: 33554432 kB\n")},
		"bus/pci/devices/0000:81:00.0/numa_node": {Data: []byte("1\n")},
	}
	m := Machine{Sys: sys, NvidiaSMI: []byte("0, GPU-aaaa0000-0000-0000-0000-000000000000, 00000000:81:00.0, NVIDIA L4\n")}
	p, err := PlanMachine(context.Background(), m, PlanOptions{ReserveCores: 1, ReserveMemory: 4 * size.GiB})
	if err != nil {
		t.Fatal(err)
	}
	a := p.Agents[0]
	if a.CPUSet != "5-7" || a.Mems != "1" || a.Memory != "28g" || a.NUMANode != 1 {
		t.Errorf("agent = %+v", a)
	}
	if p.HostCPUs != "0-4" {
		t.Errorf("host = %q, want 0-4", p.HostCPUs)
	}
}

func TestPlanGPUOnUnknownNode(t *testing.T) {
	t.Parallel()
	sys := fstest.MapFS{
		"devices/system/node/node0/cpulist":      {Data: []byte("0-3\n")},
		"devices/system/node/node0/meminfo":      {Data: []byte("Node 0 MemTotal: 33554432 kB\n")},
		"bus/pci/devices/0000:81:00.0/numa_node": {Data: []byte("3\n")},
	}
	m := Machine{Sys: sys, NvidiaSMI: []byte("0, GPU-aaaa0000-0000-0000-0000-000000000000, 00000000:81:00.0, NVIDIA L4\n")}
	_, err := PlanMachine(context.Background(), m, defaultOpts)
	// The message is the contract: it names the GPU and the node sysfs lacks.
	if err == nil || !strings.Contains(err.Error(), "GPU 0 (0000:81:00.0) is on NUMA node 3, which sysfs does not list") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseNvidiaSMIErrors(t *testing.T) {
	t.Parallel()
	const a, b = "GPU-aaaa0000-0000-0000-0000-000000000000", "GPU-bbbb0000-0000-0000-0000-000000000000"
	for _, in := range []string{
		"",
		"0, " + a + ", 00000000:18:00.0",
		"x, " + a + ", 00000000:18:00.0, H100",
		"0, abc, 00000000:18:00.0, H100",
		"0, GPU-a, 00000000:18:00.0, H100",
		"0, " + a + ", nonsense, H100",
		"0, " + a + ", 00000000:1\n#00.0, H100",
		"0, " + a + ", 00000000:18:00.0, H100\n0, " + b + ", 00000000:19:00.0, H100",
	} {
		if gpus, err := ParseNvidiaSMI([]byte(in)); err == nil {
			t.Errorf("ParseNvidiaSMI(%q) = %v, want error", in, gpus)
		}
	}
}

func TestReadTopologyErrors(t *testing.T) {
	t.Parallel()
	// want is text because the message is the contract: it says which
	// sysfs file is missing or wrong, the operator's lead on a VM or a
	// --sysfs tree.
	tests := []struct {
		name     string
		sys      fstest.MapFS
		notExist bool // the cause is a file that is not there
		want     string
	}{
		{"no nodes", fstest.MapFS{"devices/system/cpu/online": {Data: []byte("0")}}, true, "reading NUMA nodes"},
		{"bad cpulist", fstest.MapFS{"devices/system/node/node0/cpulist": {Data: []byte("x")}}, false, "bad cpu list"},
		{"no meminfo", fstest.MapFS{"devices/system/node/node0/cpulist": {Data: []byte("0")}}, true, "NUMA node 0 memory"},
		{"bad meminfo", fstest.MapFS{
			"devices/system/node/node0/cpulist": {Data: []byte("0")},
			"devices/system/node/node0/meminfo": {Data: []byte("Node 0 MemFree: 1 kB")},
		}, false, "no MemTotal"},
	}
	for _, tt := range tests {
		_, err := ReadTopology(tt.sys)
		if err == nil || errors.Is(err, fs.ErrNotExist) != tt.notExist || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%s: err = %v, want %q (a missing file: %v)", tt.name, err, tt.want, tt.notExist)
		}
	}
}
