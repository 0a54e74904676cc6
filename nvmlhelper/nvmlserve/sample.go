package nvmlserve

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// eventCounters are the clock-event counters a sample reads, by their
// field ids (nvml.h NVML_FI_DEV_CLOCKS_EVENT_REASON_*, in nanoseconds) and
// named as nvidia-smi names them (clocks_event_reasons_counters.<name>,
// microseconds), so the noise record keeps one vocabulary.
var eventCounters = []struct {
	id   uint32
	name string
}{
	{74, "sw_power_cap"},             // NVML_FI_DEV_PERF_POLICY_POWER
	{76, "sync_boost"},               // NVML_FI_DEV_PERF_POLICY_SYNC_BOOST
	{269, "sw_thermal_slowdown"},     // ..._SW_THERM_SLOWDOWN
	{270, "hw_thermal_slowdown"},     // ..._HW_THERM_SLOWDOWN
	{271, "hw_power_brake_slowdown"}, // ..._HW_POWER_BRAKE_SLOWDOWN
}

// samples reads the GPUs names selects.
func (s *handler) samples(names []string) ([]nvmlhelper.Sample, error) {
	devs, err := s.devices(names)
	if err != nil {
		return nil, err
	}
	out := make([]nvmlhelper.Sample, len(devs))
	for i, d := range devs {
		out[i] = s.sample(d)
	}
	return out, nil
}

// sample is one GPU's reading; what the GPU does not support (a MIG
// instance has no clocks of its own) stays absent.
func (s *handler) sample(d nvml.Device) nvmlhelper.Sample {
	var out nvmlhelper.Sample
	out.UUID, _ = d.GetUUID()
	if v, ret := d.GetClockInfo(nvml.CLOCK_SM); ret == nvml.SUCCESS {
		out.SMClockMHz = ptr(float64(v))
	}
	if v, ret := d.GetClockInfo(nvml.CLOCK_MEM); ret == nvml.SUCCESS {
		out.MemClockMHz = ptr(float64(v))
	}
	if v, ret := d.GetTemperature(nvml.TEMPERATURE_GPU); ret == nvml.SUCCESS {
		out.TemperatureC = ptr(float64(v))
	}
	if mw, ret := d.GetPowerUsage(); ret == nvml.SUCCESS {
		out.PowerW = ptr(float64(mw) / 1000)
	}
	out.EventMask = s.eventMask(d)
	if v, ret := d.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); ret == nvml.SUCCESS {
		out.ECCUncorrected = ptr(int64(v))
	}
	out.EventCountersUS = counters(d)
	out.Processes = s.processes(d)
	out.Xids, out.XidsUnwatched = s.xids.drain(out.UUID)
	return out
}

// eventMask is the active clock-event reasons: the call drivers from 535
// name "ClocksEventReasons", older ones only "ClocksThrottleReasons".
func (s *handler) eventMask(d nvml.Device) *uint64 {
	if s.lib.Extensions().LookupSymbol("nvmlDeviceGetCurrentClocksEventReasons") == nil {
		if v, ret := d.GetCurrentClocksEventReasons(); ret == nvml.SUCCESS {
			return ptr(v)
		}
		return nil
	}
	if v, ret := d.GetCurrentClocksThrottleReasons(); ret == nvml.SUCCESS {
		return ptr(v)
	}
	return nil
}

// counters reads the clock-event counters in one call.
func counters(d nvml.Device) map[string]float64 {
	vals := make([]nvml.FieldValue, len(eventCounters))
	for i, c := range eventCounters {
		vals[i].FieldId = c.id
	}
	if d.GetFieldValues(vals) != nvml.SUCCESS {
		return nil
	}
	out := map[string]float64{}
	for i, v := range vals {
		if nvml.Return(v.NvmlReturn) != nvml.SUCCESS {
			continue
		}
		if ns, ok := fieldNumber(v); ok {
			out[eventCounters[i].name] = ns / 1000
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// fieldNumber decodes a field value's union (nvmlValue_t) by its type.
func fieldNumber(v nvml.FieldValue) (float64, bool) {
	b := v.Value[:]
	switch nvml.ValueType(v.ValueType) {
	case nvml.VALUE_TYPE_DOUBLE:
		return math.Float64frombits(binary.LittleEndian.Uint64(b)), true
	case nvml.VALUE_TYPE_UNSIGNED_INT:
		return float64(binary.LittleEndian.Uint32(b)), true
	case nvml.VALUE_TYPE_UNSIGNED_LONG, nvml.VALUE_TYPE_UNSIGNED_LONG_LONG:
		return float64(binary.LittleEndian.Uint64(b)), true
	case nvml.VALUE_TYPE_SIGNED_LONG_LONG:
		return float64(int64(binary.LittleEndian.Uint64(b))), true
	case nvml.VALUE_TYPE_SIGNED_INT:
		return float64(int32(binary.LittleEndian.Uint32(b))), true
	case nvml.VALUE_TYPE_UNSIGNED_SHORT:
		return float64(binary.LittleEndian.Uint16(b)), true
	}
	return 0, false
}

// processes are the GPU's compute processes; NVML gives pids, the name
// is /proc/<pid>/comm where that pid is visible.
func (s *handler) processes(d nvml.Device) []nvmlhelper.Process {
	procs, ret := d.GetComputeRunningProcesses()
	if ret != nvml.SUCCESS {
		return nil
	}
	out := make([]nvmlhelper.Process, 0, len(procs))
	for _, p := range procs {
		name := ""
		if b, err := os.ReadFile(filepath.Join(s.procRoot, strconv.Itoa(int(p.Pid)), "comm")); err == nil {
			name = strings.TrimSpace(string(b))
		}
		out = append(out, nvmlhelper.Process{PID: int(p.Pid), Name: name, UsedMemoryMiB: float64(p.UsedGpuMemory) / (1 << 20)})
	}
	return out
}

func ptr[T any](v T) *T { return &v }
