package nvmlserve

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// fabric is how a fixture node's GPUs are linked.
type fabric int

const (
	// nvswitch: every GPU has 18 NVLinks to NVSwitches (8×H100 SXM).
	nvswitch fabric = iota
	// pcie: no NVLink; GPUs 0-1 and 2-3 share a PCIe switch, the pairs
	// sit on different sockets (4×L4).
	pcie
	// pairs: GPU 2k and 2k+1 joined by 4 direct NVLinks, nothing else.
	pairs
)

// node is a go-nvml mock server (NVIDIA's own mock, pkg/nvml/mock) of n
// GPUs with fixed UUIDs and bus ids, and readings that tell GPUs apart:
// GPU i runs its SM clock at 1980-i MHz. The mock leaves the calls kbgen
// makes beyond inventory unset (calling one panics), so each is set here.
func node(t *testing.T, n int, f fabric, cfg gpus.Config) *server.Server {
	t.Helper()
	s, err := server.New(server.WithGPUs(gpus.Multiple(n, cfg)...), server.WithDriverVersion("570.124.06"))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.UUID = fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", i, i)
		dev.PciBusID = fmt.Sprintf("00000000:%02X:00.0", 0x18+i*0x10)
		dev.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
		setReadings(dev, i)
		setLinks(s, dev, i, f)
	}
	setEvents(s, make(chan nvml.EventData))
	return s
}

// setEvents makes the node's NVML event sets deliver what is sent on
// events, and time out (quickly) while nothing is.
func setEvents(s *server.Server, events chan nvml.EventData) {
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(ms uint32) (nvml.EventData, nvml.Return) {
				select {
				case e := <-events:
					return e, nvml.SUCCESS
				case <-time.After(time.Duration(min(ms, 10)) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
}

func setReadings(d *server.Device, i int) {
	d.GetClockInfoFunc = func(c nvml.ClockType) (uint32, nvml.Return) {
		if c == nvml.CLOCK_SM {
			return uint32(1980 - i), nvml.SUCCESS
		}
		return 2619, nvml.SUCCESS
	}
	d.GetTemperatureFunc = func(nvml.TemperatureSensors) (uint32, nvml.Return) { return 41, nvml.SUCCESS }
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) { return 71250, nvml.SUCCESS }
	d.GetCurrentClocksEventReasonsFunc = func() (uint64, nvml.Return) { return 0x1, nvml.SUCCESS }
	d.GetCurrentClocksThrottleReasonsFunc = func() (uint64, nvml.Return) { return 0x4, nvml.SUCCESS }
	d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) { return 0, nvml.SUCCESS }
	d.GetFieldValuesFunc = func(vals []nvml.FieldValue) nvml.Return {
		for k := range vals {
			vals[k].NvmlReturn = uint32(nvml.SUCCESS)
			vals[k].ValueType = uint32(nvml.VALUE_TYPE_UNSIGNED_LONG_LONG)
			binary.LittleEndian.PutUint64(vals[k].Value[:], uint64(vals[k].FieldId)*1000)
		}
		return nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		if i != 1 {
			return nil, nvml.SUCCESS
		}
		return []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 512 << 20}}, nvml.SUCCESS
	}
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return pciInfo(d.PciBusID), nvml.SUCCESS }
}

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	for k := range min(len(bus), len(p.BusId)-1) {
		p.BusId[k] = int8(bus[k])
	}
	return p
}

// setLinks gives d its NVLinks and PCIe ancestry under fabric f.
func setLinks(s *server.Server, d *server.Device, i int, f fabric) {
	links := 0
	switch f {
	case nvswitch:
		links = 18
	case pairs:
		links = 4
	}
	d.GetNvLinkStateFunc = func(l int) (nvml.EnableState, nvml.Return) {
		if links == 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if l >= links {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		if f == nvswitch {
			return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
		}
		return nvml.NVLINK_DEVICE_TYPE_GPU, nvml.SUCCESS
	}
	d.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) {
		peer := s.Devices[i^1].(*server.Device)
		return pciInfo(peer.PciBusID), nvml.SUCCESS
	}
	d.GetTopologyCommonAncestorFunc = func(other nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
		j := other.(*server.Device).Index
		if i/2 == j/2 {
			return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
}

// withMIG turns MIG on for d with instances of the given profiles.
func withMIG(d *server.Device, profiles ...string) {
	d.MigMode = nvml.DEVICE_MIG_ENABLE
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	d.GetMigDeviceHandleByIndexFunc = func(k int) (nvml.Device, nvml.Return) {
		if k >= len(profiles) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		m := &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) {
				return fmt.Sprintf("MIG-%08x-1111-4000-8000-%012x", d.Index, k), nvml.SUCCESS
			},
			GetNameFunc: func() (string, nvml.Return) { return "NVIDIA H100 80GB HBM3 MIG " + profiles[k], nvml.SUCCESS },
		}
		return m, nvml.SUCCESS
	}
}

// l4 is an NVIDIA L4 (24 GB, PCIe only); go-nvml's mock has none.
var l4 = gpus.Config{Name: "NVIDIA L4", MemoryMB: 23034, CudaMajor: 8, CudaMinor: 9}
