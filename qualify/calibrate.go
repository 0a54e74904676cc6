package qualify

import (
	"context"
	"math"
	"runtime"
	"slices"
	"time"

	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"github.com/gpu-mode/kbgen/noise"
)

// CalibrateOptions size one calibration: Runs runs of Reps repetitions of
// the kernel with Iterations steps each (Iterations fixes the work, so a
// quiet and a loaded calibration compare).
type CalibrateOptions struct {
	Runs, Reps, Iterations int
	// CPUs pins the kernel's thread to the first of these CPUs; nil keeps
	// the process's affinity (inside a container: its cpuset) and pins to
	// its first CPU.
	CPUs []int
	// NoPin leaves the thread free to move among CPUs (the floating setup
	// the noise table compares with); the noise record covers them all.
	NoPin bool
	// Noise, when set, brackets each run with a noise record taken on the
	// CPU the kernel is pinned to (its CPUs field is set here).
	Noise *noise.Config
	// Policy judges each run's noise record.
	Policy noisepolicy.Policy
}

// Calibration is what one calibration measured.
type Calibration struct {
	Iterations int   `json:"iterations"`
	CPU        int   `json:"cpu"`
	Runs       []Run `json:"runs"`
}

// Run is one calibration run: its repetitions' times and its noise.
type Run struct {
	MeanMS       float64       `json:"mean_ms"`
	MinMS        float64       `json:"min_ms"`
	StealPercent float64       `json:"steal_percent"`
	ForeignPct   float64       `json:"foreign_cpu_percent"`
	Verdict      noise.Verdict `json:"verdict,omitempty"`
	Reasons      []string      `json:"reasons,omitempty"`
}

// kernelWords is the kernel's working set: 32 KiB, an L1 data cache, so
// the kernel measures the core and not the memory a neighbour shares.
const kernelWords = 4096

// kernel is the calibration work: a xorshift walk over an L1-resident
// buffer, integer only, with a data dependency the compiler cannot drop.
func kernel(buf []uint64, iters int) uint64 {
	x := uint64(88172645463325252)
	var s uint64
	mask := uint64(len(buf) - 1)
	for i := 0; i < iters; i++ {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		j := x & mask
		buf[j] += x
		s += buf[(j*7)&mask]
	}
	return s
}

// sink takes each kernel's result so the compiler cannot drop the work.
//
//lint:ignore U1000 written, never read: that is its purpose
var sink uint64

// IterationsFor is how many kernel steps take about d on this CPU.
func IterationsFor(d time.Duration) int {
	buf := make([]uint64, kernelWords)
	iters := 100_000
	for {
		start := time.Now()
		sink += kernel(buf, iters)
		el := time.Since(start)
		if el >= 20*time.Millisecond || iters >= 1<<30 {
			return max(1000, int(float64(iters)*float64(d)/float64(el)))
		}
		iters *= 4
	}
}

// Calibrate runs the calibration on one pinned thread.
func Calibrate(ctx context.Context, o CalibrateOptions) (*Calibration, error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	cpus := o.CPUs
	if len(cpus) == 0 {
		cpus = selfCPUs()
	}
	cal := &Calibration{Iterations: o.Iterations, CPU: -1}
	if len(cpus) > 0 && !o.NoPin {
		if err := pinThread(cpus[:1]); err != nil {
			return nil, err
		}
		cal.CPU = cpus[0]
	}
	var sampler *noise.Sampler
	if o.Noise != nil {
		cfg := *o.Noise
		if cal.CPU >= 0 {
			cfg.CPUs = []int{cal.CPU}
		} else {
			cfg.CPUs = cpus
		}
		sampler = noise.NewSampler(cfg)
	}
	buf := make([]uint64, kernelWords)
	sink += kernel(buf, o.Iterations) // warm the cache and the clock
	for r := 0; r < o.Runs; r++ {
		if err := ctx.Err(); err != nil {
			return cal, err
		}
		if sampler != nil {
			sampler.Begin("benchmark")
		}
		times := make([]float64, o.Reps)
		for i := range times {
			start := time.Now()
			sink += kernel(buf, o.Iterations)
			times[i] = float64(time.Since(start)) / 1e6
		}
		run := Run{MeanMS: round3(mean(times)), MinMS: round3(slices.Min(times))}
		if sampler != nil {
			sampler.End("benchmark")
			rec := sampler.Record(o.Policy)
			nr := rec.Runs["benchmark"]
			run.StealPercent, run.ForeignPct, run.Verdict = nr.Steal.StealPercent, nr.Foreign.CPUPercent, nr.Verdict
			for _, x := range rec.Reasons {
				run.Reasons = append(run.Reasons, x.Message)
			}
		}
		cal.Runs = append(cal.Runs, run)
	}
	return cal, nil
}

// selfCPUs is this process's affinity, from /proc/self/status.
func selfCPUs() []int {
	s := noise.NewSampler(noise.Config{NoGPU: true})
	return s.CPUs()
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

// cv is the coefficient of variation of xs in percent (sample stddev).
func cv(xs []float64) float64 {
	if len(xs) < 2 {
		return 0
	}
	m := mean(xs)
	var ss float64
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return 100 * math.Sqrt(ss/float64(len(xs)-1)) / m
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }
func round2(f float64) float64 { return math.Round(f*100) / 100 }
