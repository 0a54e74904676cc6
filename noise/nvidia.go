package noise

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/gpu-mode/kbgen/internal/nvsmi"
)

// NVIDIAReport is the run's GPU before and after, as kbgen-nvml (NVML)
// or nvidia-smi reads it, in nvidia-smi's names and units either way.
type NVIDIAReport struct {
	Availability
	// Source is what read the GPU: "nvml" (the kbgen-nvml helper) or
	// "nvidia-smi"; NVMLAbsent says why the helper was not used, or
	// stopped being used, when the source is nvidia-smi.
	Source     string     `json:"source,omitempty"`
	NVMLAbsent string     `json:"nvml_absent,omitempty"`
	UUID       string     `json:"uuid,omitempty"`
	Before     *GPUSample `json:"before,omitempty"`
	After      *GPUSample `json:"after,omitempty"`
	// EventCounters is how much each clock-event counter grew during the
	// run, as nvidia-smi reports them (microseconds); absent on drivers
	// without clocks_event_reasons_counters.
	EventCounters map[string]float64 `json:"clock_event_counters_delta,omitempty"`
	// ECCUncorrectedDelta is new uncorrected ECC errors during the run.
	ECCUncorrectedDelta *int64 `json:"ecc_uncorrected_delta,omitempty"`
	// ForeignProcesses are compute processes on the GPU before or after
	// the run, when none of the run's own can be alive.
	ForeignProcesses []GPUProcess `json:"foreign_processes"`
	// Xids are the Xid critical errors NVML reported on the GPU during
	// the run (kbgen-nvml listens for them all along; nvidia-smi cannot);
	// XidsUnwatched says why the helper could not listen.
	Xids          []int  `json:"xids_during_run,omitempty"`
	XidsUnwatched string `json:"xids_unwatched,omitempty"`
}

// GPUSample is one nvidia-smi reading of the GPU.
type GPUSample struct {
	SMClockMHz   *float64 `json:"sm_clock_mhz,omitempty"`
	MemClockMHz  *float64 `json:"mem_clock_mhz,omitempty"`
	TemperatureC *float64 `json:"temperature_c,omitempty"`
	PowerW       *float64 `json:"power_w,omitempty"`
	// EventReasons are the active clock-event (throttle) reasons,
	// decoded from EventMask; GPU idle is left out.
	EventReasons []string `json:"clock_event_reasons"`
	EventMask    string   `json:"clock_event_mask,omitempty"`
	ECCUncorr    *int64   `json:"ecc_uncorrected,omitempty"`
	counters     map[string]float64
}

// GPUProcess is a compute process nvidia-smi lists on the GPU.
type GPUProcess struct {
	PID          int     `json:"pid"`
	Name         string  `json:"name"`
	UsedMemoryMB float64 `json:"used_memory_mib"`
}

// clockEvents are nvmlClocksEventReasons bits (nvml.h); GPU idle (0x1)
// is not noise and is left out.
var clockEvents = []struct {
	bit  uint64
	name string
	kind eventKind
}{
	{0x2, "applications_clocks_setting", eventSetting},
	{0x4, "sw_power_cap", eventLoad},
	{0x8, "hw_slowdown", eventLoad},
	{0x10, "sync_boost", eventExternal},
	{0x20, "sw_thermal_slowdown", eventLoad},
	{0x40, "hw_thermal_slowdown", eventLoad},
	{0x80, "hw_power_brake_slowdown", eventExternal},
	{0x100, "display_clock_setting", eventSetting},
}

// eventKind says who can cause a clock event.
type eventKind int

const (
	// eventSetting: an administrator's setting (locked application
	// clocks are good practice for benchmarks); recorded, not noise.
	eventSetting eventKind = iota
	// eventLoad: power or thermal limits, which the job's own load can
	// reach; external only when active before the run started.
	eventLoad
	// eventExternal: never the job's doing (an external power brake,
	// another GPU's sync boost).
	eventExternal
)

// eventKindOf names an event's kind.
func eventKindOf(name string) eventKind {
	for _, e := range clockEvents {
		if e.name == name {
			return e.kind
		}
	}
	return eventLoad
}

// decodeEvents names the bits set in mask.
func decodeEvents(mask uint64) []string {
	out := []string{}
	for _, e := range clockEvents {
		if mask&e.bit != 0 {
			out = append(out, e.name)
		}
	}
	return out
}

// gpuQuery levels: the newest field names first; an older driver that
// rejects a field gets the next list.
var gpuQueries = [][]string{
	{"uuid", "clocks.sm", "clocks.mem", "clocks_event_reasons.active", "temperature.gpu", "power.draw", "ecc.errors.uncorrected.volatile.total",
		"clocks_event_reasons_counters.sw_power_cap", "clocks_event_reasons_counters.sw_thermal_slowdown",
		"clocks_event_reasons_counters.hw_thermal_slowdown", "clocks_event_reasons_counters.hw_power_brake_slowdown",
		"clocks_event_reasons_counters.sync_boost"},
	{"uuid", "clocks.sm", "clocks.mem", "clocks_event_reasons.active", "temperature.gpu", "power.draw", "ecc.errors.uncorrected.volatile.total"},
	{"uuid", "clocks.sm", "clocks.mem", "clocks_throttle_reasons.active", "temperature.gpu", "power.draw", "ecc.errors.uncorrected.volatile.total"},
}

// nvidiaProbe queries the run's GPUs through kbgen-nvml, or nvidia-smi
// where the helper is absent or has failed; it remembers which
// nvidia-smi query level the driver accepts, so only the first sample
// pays for a fallback.
type nvidiaProbe struct {
	env []string
	// gpu selects the GPU (-i): a UUID or an index; "" is the first
	// count visible ones (inside the sandbox, the job's set).
	gpu   string
	count int
	nvml  *nvmlConn
	mu    sync.Mutex
	level int
}

type nvidiaSample struct {
	gpu    *GPUSample
	uuid   string
	procs  []GPUProcess
	err    error
	source string
	// nvmlAbsent is why the helper did not take this sample.
	nvmlAbsent string
	// xids are NVML's Xids since the previous sample (the helper only).
	xids          []int
	xidsUnwatched string
}

// sample reads each of the run's GPUs: one sample per GPU, or a single
// one carrying the error.
func (p *nvidiaProbe) sample(ctx context.Context) []nvidiaSample {
	h, err := p.nvml.get()
	if h != nil {
		s, serr := sampleNVML(h, p.gpu, p.count)
		if serr == nil {
			return s
		}
		p.nvml.fail(serr)
		err = serr
	}
	out := p.sampleSMI(ctx)
	for i := range out {
		out[i].nvmlAbsent = err.Error()
	}
	return out
}

// sampleSMI reads the GPUs and their compute processes with two
// nvidia-smi calls, run at once.
func (p *nvidiaProbe) sampleSMI(ctx context.Context) []nvidiaSample {
	var wg sync.WaitGroup
	var apps []byte
	var appsErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		apps, appsErr = runTool(ctx, p.env, "nvidia-smi", nvsmi.AppsArgs...)
	}()
	gpus, err := p.query(ctx)
	wg.Wait()
	if err != nil {
		return []nvidiaSample{{err: err, source: sourceNvidiaSMI}}
	}
	out := make([]nvidiaSample, 0, len(gpus))
	for _, g := range gpus[:min(len(gpus), max(p.count, 1))] {
		s := nvidiaSample{gpu: g.gpu, uuid: g.uuid, source: sourceNvidiaSMI}
		if appsErr == nil {
			s.procs = parseApps(apps, s.uuid)
		}
		out = append(out, s)
	}
	return out
}

// gpuLine is one GPU's line of a --query-gpu CSV.
type gpuLine struct {
	gpu  *GPUSample
	uuid string
}

func (p *nvidiaProbe) query(ctx context.Context) ([]gpuLine, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for ; p.level < len(gpuQueries); p.level++ {
		fields := gpuQueries[p.level]
		args := nvsmi.QueryGPU(fields...)
		if p.gpu != "" {
			args = append(args, "-i", p.gpu)
		}
		out, err := runTool(ctx, p.env, "nvidia-smi", args...)
		if err != nil {
			if strings.Contains(err.Error(), "not a valid field") && p.level+1 < len(gpuQueries) {
				continue
			}
			return nil, err
		}
		return parseGPUs(out, fields)
	}
	return nil, errors.New("nvidia-smi accepts none of kbgen's queries")
}

// parseGPUs reads every line of a --query-gpu CSV.
func parseGPUs(out []byte, fields []string) ([]gpuLine, error) {
	var gpus []gpuLine
	for line := range strings.Lines(string(out)) {
		if strings.TrimSpace(line) == "" {
			continue
		}
		g, uuid, err := parseGPU([]byte(line), fields)
		if err != nil {
			return nil, err
		}
		gpus = append(gpus, gpuLine{g, uuid})
	}
	if len(gpus) == 0 {
		return nil, errors.New("nvidia-smi printed no GPU")
	}
	return gpus, nil
}

// parseGPU reads the first line of a --query-gpu CSV.
func parseGPU(out []byte, fields []string) (*GPUSample, string, error) {
	line := firstLine(string(out))
	vals := strings.Split(line, ",")
	if len(vals) != len(fields) {
		return nil, "", fmt.Errorf("nvidia-smi printed %q, not %d fields", line, len(fields))
	}
	s := &GPUSample{EventReasons: []string{}}
	uuid := ""
	for i, f := range fields {
		v := strings.TrimSpace(vals[i])
		num, numErr := strconv.ParseFloat(v, 64)
		ok := numErr == nil
		switch {
		case f == "uuid":
			uuid = v
		case f == "clocks.sm" && ok:
			s.SMClockMHz = &num
		case f == "clocks.mem" && ok:
			s.MemClockMHz = &num
		case f == "temperature.gpu" && ok:
			s.TemperatureC = &num
		case f == "power.draw" && ok:
			s.PowerW = &num
		case f == "ecc.errors.uncorrected.volatile.total" && ok:
			n := int64(num)
			s.ECCUncorr = &n
		case strings.HasSuffix(f, "reasons.active"):
			if mask, err := strconv.ParseUint(strings.TrimPrefix(v, "0x"), 16, 64); err == nil {
				s.EventMask = v
				s.EventReasons = decodeEvents(mask)
			}
		case strings.HasPrefix(f, "clocks_event_reasons_counters.") && ok:
			if s.counters == nil {
				s.counters = map[string]float64{}
			}
			s.counters[strings.TrimPrefix(f, "clocks_event_reasons_counters.")] = num
		}
	}
	return s, uuid, nil
}

// parseApps reads --query-compute-apps lines on the GPU uuid.
func parseApps(out []byte, uuid string) []GPUProcess {
	var procs []GPUProcess
	for _, a := range nvsmi.ParseApps(out, uuid) {
		procs = append(procs, GPUProcess{PID: a.PID, Name: a.Name, UsedMemoryMB: a.UsedMiB})
	}
	return procs
}

// nvidiaReports pairs each GPU's before and after samples: the first
// GPU's report, and its peers'. A failed sample is the first GPU's
// report (unavailable, with why) and no peers.
func nvidiaReports(before, after []nvidiaSample) (NVIDIAReport, []NVIDIAReport) {
	first := nvidiaReport(before[0], after[0])
	var peers []NVIDIAReport
	for i := 1; i < min(len(before), len(after)); i++ {
		if before[i].uuid == after[i].uuid {
			peers = append(peers, nvidiaReport(before[i], after[i]))
		}
	}
	return first, peers
}

func nvidiaReport(before, after nvidiaSample) NVIDIAReport {
	switch {
	case errors.Is(before.err, errNotFound) || errors.Is(after.err, errNotFound):
		return NVIDIAReport{Availability: unavailable("nvidia-smi not found on PATH"), ForeignProcesses: []GPUProcess{}}
	case before.err != nil:
		return NVIDIAReport{Availability: unavailable("nvidia-smi: %v", before.err), ForeignProcesses: []GPUProcess{}}
	case after.err != nil:
		return NVIDIAReport{Availability: unavailable("nvidia-smi: %v", after.err), ForeignProcesses: []GPUProcess{}}
	}
	r := NVIDIAReport{Availability: Availability{Status: OK}, Source: after.source, NVMLAbsent: cmp.Or(after.nvmlAbsent, before.nvmlAbsent), UUID: after.uuid,
		Xids: after.xids, XidsUnwatched: after.xidsUnwatched, Before: before.gpu, After: after.gpu, ForeignProcesses: []GPUProcess{}}
	for k, a := range after.gpu.counters {
		if b, ok := before.gpu.counters[k]; ok && a >= b {
			if r.EventCounters == nil {
				r.EventCounters = map[string]float64{}
			}
			r.EventCounters[k] = a - b
		}
	}
	if b, a := before.gpu.ECCUncorr, after.gpu.ECCUncorr; b != nil && a != nil {
		d := *a - *b
		r.ECCUncorrectedDelta = &d
	}
	seen := map[int]bool{}
	for _, p := range slices.Concat(before.procs, after.procs) {
		if !seen[p.PID] {
			seen[p.PID] = true
			r.ForeignProcesses = append(r.ForeignProcesses, p)
		}
	}
	return r
}
