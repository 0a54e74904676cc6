package noise

import "syscall"

// CtxSwitchReport counts the context switches of everything the run
// started (the harness and its descendants, all reaped by the runner),
// from getrusage(RUSAGE_CHILDREN). Involuntary ones are preemptions:
// another runnable task took the CPU. A job with more threads than CPUs
// causes them itself, so they are recorded, never a reason.
type CtxSwitchReport struct {
	Availability
	Involuntary int64 `json:"involuntary"`
	Voluntary   int64 `json:"voluntary"`
	// InvoluntaryPerSecond is per second of the run's wall time.
	InvoluntaryPerSecond float64 `json:"involuntary_per_second"`
}

// childrenRusage is getrusage(RUSAGE_CHILDREN).
func childrenRusage() (syscall.Rusage, error) {
	var ru syscall.Rusage
	err := syscall.Getrusage(syscall.RUSAGE_CHILDREN, &ru)
	return ru, err
}

func ctxSwitchReport(before, after syscall.Rusage, seconds float64) CtxSwitchReport {
	r := CtxSwitchReport{
		Availability: Availability{Status: OK},
		Involuntary:  int64(after.Nivcsw - before.Nivcsw),
		Voluntary:    int64(after.Nvcsw - before.Nvcsw),
	}
	if seconds > 0 {
		r.InvoluntaryPerSecond = round2(float64(r.Involuntary) / seconds)
	}
	return r
}
