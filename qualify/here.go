package qualify

import (
	"context"
	"time"

	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/noise"
)

// Here is `kbgen node calibrate`, what a Launcher runs on a placement:
// the calibration, or (Load) the load for Duration.
type Here struct {
	// CPUs is a kernel CPU list ("": this process's CPUs).
	CPUs     string
	Load     bool
	Duration time.Duration
	// Iterations 0 sizes one repetition to about 12 ms on this machine.
	Runs, Reps, Iterations int
	NoPin                  bool
}

// Run runs it; the calibration is nil after a load. A CPU list that does
// not parse carries exitcode.Usage.
func (h Here) Run(ctx context.Context) (*Calibration, error) {
	var cpus []int
	if h.CPUs != "" {
		var err error
		if cpus, err = cpulist.Parse(h.CPUs); err != nil {
			return nil, exitcode.Usagef("--cpus: %w", err)
		}
	}
	if h.Load {
		return nil, Load(ctx, cpus, h.Duration)
	}
	if h.Iterations <= 0 {
		h.Iterations = IterationsFor(12 * time.Millisecond)
	}
	return Calibrate(ctx, CalibrateOptions{
		Runs: h.Runs, Reps: h.Reps, Iterations: h.Iterations, CPUs: cpus, NoPin: h.NoPin,
		Noise: &noise.Config{NoGPU: true},
	})
}
