package nvmlserve

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/go-cmp/cmp"

	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// converse runs Serve over the request lines and returns its replies,
// the hello first.
func converse(t *testing.T, lib nvml.Interface, lines ...string) ([]nvmlhelper.Reply, error) {
	t.Helper()
	var out bytes.Buffer
	err := Serve(lib, strings.NewReader(strings.Join(lines, "\n")), &out)
	var replies []nvmlhelper.Reply
	sc := bufio.NewScanner(&out)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r nvmlhelper.Reply
		if jerr := json.Unmarshal(sc.Bytes(), &r); jerr != nil {
			t.Fatalf("reply %q is not JSON: %v", sc.Text(), jerr)
		}
		replies = append(replies, r)
	}
	return replies, err
}

func TestServeSample(t *testing.T) {
	t.Parallel()
	mhz := func(v float64) *float64 { return &v }
	gpu1 := nvmlhelper.Sample{
		UUID: "GPU-00000001-0000-4000-8000-000000000001", SMClockMHz: mhz(1979), MemClockMHz: mhz(2619),
		TemperatureC: mhz(41), PowerW: mhz(71.25), EventMask: ptr(uint64(0x1)), ECCUncorrected: ptr(int64(0)),
		// The fixture's field values are id×1000 ns: id µs.
		EventCountersUS: map[string]float64{"sw_power_cap": 74, "sync_boost": 76, "sw_thermal_slowdown": 269, "hw_thermal_slowdown": 270, "hw_power_brake_slowdown": 271},
		Processes:       []nvmlhelper.Process{{PID: 4242, UsedMemoryMiB: 512}},
	}
	tests := []struct {
		name    string
		request string
		want    nvmlhelper.Reply
	}{
		{"by UUID", `{"op":"sample","gpus":["GPU-00000001-0000-4000-8000-000000000001"]}`, nvmlhelper.Reply{Samples: []nvmlhelper.Sample{gpu1}}},
		{"by index", `{"op":"sample","gpus":["1"]}`, nvmlhelper.Reply{Samples: []nvmlhelper.Sample{gpu1}}},
		{"unknown GPU", `{"op":"sample","gpus":["GPU-ffffffff-0000-4000-8000-000000000001"]}`, nvmlhelper.Reply{Error: "GPU GPU-ffffffff-0000-4000-8000-000000000001: ERROR_INVALID_ARGUMENT"}},
		{"not a GPU name", `{"op":"sample","gpus":["all"]}`, nvmlhelper.Reply{Error: `GPU "all" is neither a UUID nor an index`}},
		{"unknown op", `{"op":"reset"}`, nvmlhelper.Reply{Error: `unknown op "reset" (want sample or inventory)`}},
		{"not JSON", `sample 0`, nvmlhelper.Reply{Error: "unreadable request: invalid character 's' looking for beginning of value"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := node(t, 2, pairs, gpus.H100_SXM5_80GB)
			s.Devices[1].(*server.Device).GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
				return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 512 << 20}}, nvml.SUCCESS
			}
			// The request after the one tested still gets its answer:
			// a bad request does not end the helper.
			replies, err := converse(t, s, tc.request, `{"op":"sample","gpus":["0"]}`)
			if err != nil {
				t.Fatal(err)
			}
			if len(replies) != 3 || replies[0].Driver != "570.124.06" || replies[0].Protocol != nvmlhelper.Protocol {
				t.Fatalf("replies = %+v, want a hello with the protocol and driver, and two answers", replies)
			}
			// Pid 4242 is not this test's: no name, whatever /proc holds.
			for i := range replies[1].Samples {
				for k := range replies[1].Samples[i].Processes {
					replies[1].Samples[i].Processes[k].Name = ""
				}
			}
			if d := cmp.Diff(tc.want, replies[1]); d != "" {
				t.Errorf("reply (-want +got):\n%s", d)
			}
			if len(replies[2].Samples) != 1 || *replies[2].Samples[0].SMClockMHz != 1980 {
				t.Errorf("the next request got %+v, want GPU 0's sample", replies[2])
			}
		})
	}
}

func TestServeSampleEveryGPU(t *testing.T) {
	t.Parallel()
	replies, err := converse(t, node(t, 4, pcie, l4), `{"op":"sample"}`)
	if err != nil {
		t.Fatal(err)
	}
	var clocks []float64
	for _, s := range replies[1].Samples {
		clocks = append(clocks, *s.SMClockMHz)
	}
	if d := cmp.Diff([]float64{1980, 1979, 1978, 1977}, clocks); d != "" {
		t.Errorf("SM clocks of every GPU, in index order (-want +got):\n%s", d)
	}
}

// An older driver has no ClocksEventReasons: the mask comes from the
// throttle-reasons call it does have.
func TestServeSampleOldDriver(t *testing.T) {
	t.Parallel()
	s := node(t, 1, pcie, l4)
	s.LookupSymbolFunc = func(sym string) error {
		if sym == "nvmlDeviceGetCurrentClocksEventReasons" {
			return nvml.ERROR_FUNCTION_NOT_FOUND
		}
		return nil
	}
	replies, err := converse(t, s, `{"op":"sample"}`)
	if err != nil {
		t.Fatal(err)
	}
	if m := replies[1].Samples[0].EventMask; m == nil || *m != 0x4 {
		t.Errorf("event mask = %v, want the throttle reasons' 0x4", m)
	}
}

func TestServeInitFails(t *testing.T) {
	t.Parallel()
	s := node(t, 1, pcie, l4)
	s.InitFunc = func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND }
	replies, err := converse(t, s, `{"op":"sample"}`)
	if err == nil {
		t.Fatal("Serve returned nil; want the load error")
	}
	want := []nvmlhelper.Reply{{Error: "loading NVML: ERROR_LIBRARY_NOT_FOUND"}}
	if d := cmp.Diff(want, replies); d != "" {
		t.Errorf("replies (-want +got):\n%s", d)
	}
}

func TestServeInventory(t *testing.T) {
	t.Parallel()
	bus := func(i int) string {
		return strings.ToUpper("00000000:" + []string{"18", "28", "38", "48"}[i] + ":00.0")
	}
	devs := func(name string, n int) []nvmlhelper.Device {
		var out []nvmlhelper.Device
		for i := range n {
			out = append(out, nvmlhelper.Device{Index: i, UUID: node(t, 4, pcie, l4).Devices[i].(*server.Device).UUID, PCIBus: bus(i), Name: name})
		}
		return out
	}
	tests := []struct {
		name  string
		nvml  func() nvml.Interface
		gpus  []nvmlhelper.Device
		links [][]string
	}{
		{"NVSwitch", func() nvml.Interface { return node(t, 4, nvswitch, gpus.H100_SXM5_80GB) }, devs("NVIDIA H100 80GB HBM3", 4), [][]string{
			{"X", "NV18", "NV18", "NV18"}, {"NV18", "X", "NV18", "NV18"}, {"NV18", "NV18", "X", "NV18"}, {"NV18", "NV18", "NV18", "X"},
		}},
		{"PCIe only", func() nvml.Interface { return node(t, 4, pcie, l4) }, devs("NVIDIA L4", 4), [][]string{
			{"X", "PIX", "SYS", "SYS"}, {"PIX", "X", "SYS", "SYS"}, {"SYS", "SYS", "X", "PIX"}, {"SYS", "SYS", "PIX", "X"},
		}},
		{"NVLink pairs", func() nvml.Interface { return node(t, 4, pairs, gpus.A100_SXM4_80GB) }, devs("NVIDIA A100-SXM4-80GB", 4), [][]string{
			{"X", "NV4", "SYS", "SYS"}, {"NV4", "X", "SYS", "SYS"}, {"SYS", "SYS", "X", "NV4"}, {"SYS", "SYS", "NV4", "X"},
		}},
		{"MIG", func() nvml.Interface {
			s := node(t, 2, nvswitch, gpus.H100_SXM5_80GB)
			withMIG(s.Devices[1].(*server.Device), "3g.40gb", "1g.10gb")
			return s
		}, append(devs("NVIDIA H100 80GB HBM3", 1), nvmlhelper.Device{Index: 1, UUID: "GPU-00000001-0000-4000-8000-000000000001", PCIBus: bus(1), Name: "NVIDIA H100 80GB HBM3", MIG: []nvmlhelper.MIGDevice{
			{Profile: "3g.40gb", UUID: "MIG-00000001-1111-4000-8000-000000000000"}, {Profile: "1g.10gb", UUID: "MIG-00000001-1111-4000-8000-000000000001"},
		}}), [][]string{{"X", "NV18"}, {"NV18", "X"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			replies, err := converse(t, tc.nvml(), `{"op":"inventory"}`)
			if err != nil {
				t.Fatal(err)
			}
			want := &nvmlhelper.Inventory{Driver: "570.124.06", GPUs: tc.gpus, Links: tc.links}
			if d := cmp.Diff(nvmlhelper.Reply{Inventory: want}, replies[1]); d != "" {
				t.Errorf("inventory (-want +got):\n%s", d)
			}
		})
	}
}

// WriteInventory's file is what the node reads with --nvml-inventory.
func TestWriteInventory(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	if err := WriteInventory(node(t, 4, pcie, l4), &out); err != nil {
		t.Fatal(err)
	}
	var inv nvmlhelper.Inventory
	if err := json.Unmarshal(out.Bytes(), &inv); err != nil {
		t.Fatalf("not an inventory: %v\n%s", err, out.String())
	}
	if len(inv.GPUs) != 4 || inv.Links[2][3] != "PIX" || inv.Driver != "570.124.06" {
		t.Errorf("inventory = %+v", inv)
	}
	s := node(t, 1, pcie, l4)
	s.InitFunc = func() nvml.Return { return nvml.ERROR_DRIVER_NOT_LOADED }
	if err := WriteInventory(s, &out); !errors.Is(err, nvml.ERROR_DRIVER_NOT_LOADED) {
		t.Errorf("WriteInventory without a driver = %v", err)
	}
}
