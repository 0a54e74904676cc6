package noise

import (
	"cmp"
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// Where an NVIDIA sample came from (NVIDIAReport.Source).
const (
	sourceNVML      = "nvml"
	sourceNvidiaSMI = "nvidia-smi"
)

// nvmlConn is kbgen-nvml, started when the Sampler is made so that
// loading NVML overlaps the job's compile, and used for every sample of
// the job. Once it fails, the probe uses nvidia-smi for the rest.
type nvmlConn struct {
	ready  chan struct{}
	helper *nvmlhelper.Helper
	err    error
}

// startNVML execs the helper at loc now, and waits for NVML to load in
// the background: the exec is done before the caller goes on (in the
// runner, before the evaluation's first process), the load overlaps its
// work. loc without a path gives a connection already failed with loc's
// reason.
func startNVML(loc nvmlhelper.Location, env []string, sup nvmlhelper.Supervisor) *nvmlConn {
	c := &nvmlConn{ready: make(chan struct{})}
	if loc.Path == "" {
		c.err = errors.New(cmp.Or(loc.Absent, "no kbgen-nvml given"))
		close(c.ready)
		return c
	}
	h, err := nvmlhelper.LaunchSupervised(loc.Path, env, 0, sup)
	if err != nil {
		c.err = err
		close(c.ready)
		return c
	}
	go func() {
		defer close(c.ready)
		if err := h.Ready(); err != nil {
			c.err = err
			return
		}
		c.helper = h
	}()
	return c
}

// get waits for the start and returns the helper, or why there is none.
func (c *nvmlConn) get() (*nvmlhelper.Helper, error) {
	<-c.ready
	return c.helper, c.err
}

// fail records why the helper is no longer used and ends it.
func (c *nvmlConn) fail(err error) {
	<-c.ready
	if c.helper != nil {
		_ = c.helper.Close()
		c.helper = nil
	}
	c.err = err
}

// close ends the helper.
func (c *nvmlConn) close() {
	<-c.ready
	if c.helper != nil {
		_ = c.helper.Close()
	}
}

// sampleNVML reads gpu, or ("") the first count visible GPUs, through
// the helper.
func sampleNVML(h *nvmlhelper.Helper, gpu string, count int) ([]nvidiaSample, error) {
	var names []string
	if gpu != "" {
		names = []string{gpu}
	}
	samples, err := h.Sample(names...)
	if err != nil {
		return nil, err
	}
	if len(samples) == 0 {
		return nil, fmt.Errorf("kbgen-nvml sees no GPU")
	}
	out := make([]nvidiaSample, 0, len(samples))
	for _, s := range samples[:min(len(samples), max(count, 1))] {
		out = append(out, fromNVML(s))
	}
	return out, nil
}

// fromNVML is the helper's reading in the nvidia-smi path's terms.
func fromNVML(s nvmlhelper.Sample) nvidiaSample {
	g := &GPUSample{
		SMClockMHz: s.SMClockMHz, MemClockMHz: s.MemClockMHz, TemperatureC: s.TemperatureC, PowerW: s.PowerW,
		ECCUncorr: s.ECCUncorrected, EventReasons: []string{}, counters: s.EventCountersUS,
	}
	if s.EventMask != nil {
		g.EventMask = fmt.Sprintf("0x%016X", *s.EventMask)
		g.EventReasons = decodeEvents(*s.EventMask)
	}
	procs := make([]GPUProcess, 0, len(s.Processes))
	for _, p := range s.Processes {
		procs = append(procs, GPUProcess{PID: p.PID, Name: p.Name, UsedMemoryMB: p.UsedMemoryMiB})
	}
	return nvidiaSample{gpu: g, uuid: s.UUID, procs: procs, source: sourceNVML, xids: s.Xids, xidsUnwatched: s.XidsUnwatched}
}

// NVMLGPUs reads the job's GPUs through kbgen-nvml now and says how many
// answered: the runner's own word on whether the GPU still works after a
// run claimed it does not. An error when the helper is absent or fails
// (the caller asks nvidia-smi then); the helper closes itself after a
// broken exchange, and the next sample falls back as usual.
func (s *Sampler) NVMLGPUs() (int, error) {
	h, err := s.nv.nvml.get()
	if h == nil {
		return 0, err
	}
	got, err := sampleNVML(h, s.nv.gpu, s.nv.count)
	return len(got), err
}
