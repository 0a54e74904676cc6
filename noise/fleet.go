package noise

import "github.com/gpu-mode/kbgen/internal/xid"

// FleetCounts is what kbgen serve's per-agent series take from a record
// (fleet/hostfacts): the Xids NVML reported on the run's GPUs that are
// the machine's fault (xid.ByProgram's are the program's), and the
// seconds their clock-event counters grew, events that are not settings
// (the job's own load and external ones, as Judge lists them), all runs
// and GPUs together. A nil record counts nothing.
func (r *Record) FleetCounts() (xids int, clockEventSeconds float64) {
	if r == nil {
		return 0, 0
	}
	for _, run := range r.Runs {
		if run == nil {
			continue
		}
		for _, g := range append([]NVIDIAReport{run.NVIDIA}, run.NVIDIAPeers...) {
			for _, x := range g.Xids {
				if !xid.ByProgram(x) {
					xids++
				}
			}
			for k, us := range g.EventCounters {
				if us > 0 && eventKindOf(k) != eventSetting {
					clockEventSeconds += us / 1e6
				}
			}
		}
	}
	return xids, clockEventSeconds
}
