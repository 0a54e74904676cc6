package canary

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Point is one calibration measurement on one agent.
type Point struct {
	At      time.Time
	Seconds float64
	// Quiet: the run's noise record was clean; only quiet points make a
	// baseline.
	Quiet bool
}

// Policy are drift's thresholds.
type Policy struct {
	MinBaseline int     // quiet points the baseline needs; default 8
	Window      int     // the most recent quiet points the baseline uses; default 30
	Z           float64 // modified z past which a point is off; default 3.5
	Floor       float64 // relative change a point also needs; default 0.02
	Consecutive int     // off points in a row, same direction; default 2
}

// DefaultPolicy is the issue's: >= 8 quiet points, z 3.5, 2 %, 2 in a row.
var DefaultPolicy = Policy{MinBaseline: 8, Window: 30, Z: 3.5, Floor: 0.02, Consecutive: 2}

func (p Policy) withDefaults() Policy {
	d := DefaultPolicy
	if p.MinBaseline <= 0 {
		p.MinBaseline = d.MinBaseline
	}
	if p.Window < p.MinBaseline {
		p.Window = max(d.Window, p.MinBaseline)
	}
	if p.Z <= 0 {
		p.Z = d.Z
	}
	if p.Floor <= 0 {
		p.Floor = d.Floor
	}
	if p.Consecutive <= 0 {
		p.Consecutive = d.Consecutive
	}
	return p
}

// Verdict is the judgement of an agent's latest points.
type Verdict struct {
	Drift bool
	// Baseline and MAD are the median and median absolute deviation of
	// the baseline's points; Points how many it had.
	Baseline, MAD float64
	Points        int
	// Z and Change are the latest point's modified z and relative change.
	Z, Change float64
	Reason    string
}

// Judge says whether history (oldest first) ends in drift: its last
// Consecutive points each off the baseline made of the quiet points
// before them.
func Judge(history []Point, p Policy) Verdict {
	p = p.withDefaults()
	if len(history) < p.Consecutive {
		return Verdict{Reason: "too few points"}
	}
	recent := history[len(history)-p.Consecutive:]
	var base []float64
	for _, pt := range history[:len(history)-p.Consecutive] {
		if pt.Quiet && pt.Seconds > 0 && !math.IsInf(pt.Seconds, 0) {
			base = append(base, pt.Seconds)
		}
	}
	if len(base) > p.Window {
		base = base[len(base)-p.Window:]
	}
	v := Verdict{Points: len(base)}
	if len(base) < p.MinBaseline {
		v.Reason = fmt.Sprintf("baseline of %d quiet points, %d needed", len(base), p.MinBaseline)
		return v
	}
	v.Baseline = Median(base)
	v.MAD = MAD(base)
	sign := 0
	for i, pt := range recent {
		z, change := modifiedZ(pt.Seconds, v.Baseline, v.MAD), pt.Seconds/v.Baseline-1
		v.Z, v.Change = z, change
		s := int(math.Copysign(1, change))
		off := math.Abs(z) > p.Z && math.Abs(change) >= p.Floor
		if !off || (i > 0 && s != sign) {
			v.Reason = fmt.Sprintf("point %d of the last %d is within z %.1f or %.0f %%, or turned", i+1, p.Consecutive, p.Z, 100*p.Floor)
			return v
		}
		sign = s
	}
	v.Drift = true
	v.Reason = fmt.Sprintf("the last %d points are %+.1f %% off the baseline %.6g s (modified z %.1f)", p.Consecutive, 100*v.Change, v.Baseline, v.Z)
	return v
}

// modifiedZ is Iglewicz and Hoaglin's modified z; with a MAD of 0 any
// difference is infinitely far (the floor still decides).
func modifiedZ(x, median, mad float64) float64 {
	if mad == 0 {
		switch {
		case x == median:
			return 0
		case x > median:
			return math.Inf(1)
		}
		return math.Inf(-1)
	}
	return 0.6745 * (x - median) / mad
}

// Median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MAD is the median absolute deviation from the median.
func MAD(xs []float64) float64 {
	m := Median(xs)
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - m)
	}
	return Median(dev)
}

// Offsets is each agent's latest time relative to the median of the
// agents with the same hardware fingerprint (GPU model, driver, …):
// +0.05 is 5 % slower than its peers. An agent alone in its fingerprint
// has no offset.
func Offsets(latest map[string]float64, fingerprint map[string]string) map[string]float64 {
	groups := map[string][]float64{}
	for agent, s := range latest {
		groups[fingerprint[agent]] = append(groups[fingerprint[agent]], s)
	}
	out := map[string]float64{}
	for agent, s := range latest {
		g := groups[fingerprint[agent]]
		if m := Median(g); len(g) > 1 && m > 0 {
			out[agent] = s/m - 1
		}
	}
	return out
}
