package canary

import (
	"fmt"
	"math"
)

// Defaults of Options.
const (
	// DefaultZ is the robust z beyond which a point is an outlier: 3.5,
	// Iglewicz & Hoaglin's cut-off for the modified z-score ("How to
	// Detect and Handle Outliers", ASQC 1993).
	DefaultZ = 3.5
	// DefaultFloor is the least relative change that matters (2 %): a
	// very quiet agent's tiny MAD must not turn 0.3 % into an alarm.
	DefaultFloor = 0.02
	// DefaultOffsetFloor is the least offset from its hardware peers that
	// makes an agent off (5 %): identical parts differ by a few percent
	// for reasons no operator can fix (power and thermal binning; Sinha et
	// al., "Not All GPUs Are Created Equal", SC22, measured up to 9 % on
	// SGEMM across one system's V100s), so the drift floor would page on
	// healthy machines.
	DefaultOffsetFloor = 0.05
	// DefaultPersistence is how many canaries in a row must drift.
	DefaultPersistence = 2
	// MinBaseline is the fewest quiet points a baseline is made of.
	MinBaseline = 8
)

// Options tune the drift rule; zero fields take the defaults.
type Options struct {
	Z     float64
	Floor float64
	// OffsetFloor is the least offset from the agent's hardware peers
	// that judges it off (Offsets).
	OffsetFloor float64
	Persistence int
	// Baseline is how many quiet points, the first of a context, make
	// its baseline (at least MinBaseline).
	Baseline int
}

func (o Options) withDefaults() Options {
	if o.Z <= 0 {
		o.Z = DefaultZ
	}
	if o.Floor <= 0 {
		o.Floor = DefaultFloor
	}
	if o.OffsetFloor <= 0 {
		o.OffsetFloor = DefaultOffsetFloor
	}
	if o.Persistence <= 0 {
		o.Persistence = DefaultPersistence
	}
	o.Baseline = max(o.Baseline, MinBaseline)
	return o
}

// Baseline is an (agent, context)'s reference: the median and scaled MAD
// of its first quiet points.
type Baseline struct {
	Median float64 `json:"median"`
	MAD    float64 `json:"mad"`
	N      int     `json:"points"`
}

// Scored is one point after the baseline, judged against it.
type Scored struct {
	Point
	Z      float64 `json:"z"`
	Change float64 `json:"change"` // relative to the baseline median
	// Outlier: beyond both the robust z and the floor.
	Outlier bool `json:"outlier"`
}

// State is an agent's canary state.
type State string

// The states.
const (
	Baselining State = "baselining" // fewer than the baseline's points in this context
	OK         State = "ok"
	Drift      State = "drift"
)

// Assessment is one agent's canary series judged.
type Assessment struct {
	Agent       string   `json:"agent"`
	Fingerprint string   `json:"fingerprint"`
	Context     Context  `json:"context"`
	State       State    `json:"state"`
	Baseline    Baseline `json:"baseline"`
	// Median is the median of the context's quiet points (the offset's).
	Median float64  `json:"median"`
	Scored []Scored `json:"scored,omitempty"`
	// Streak is how many of the last scored points are outliers on the
	// same side.
	Streak int `json:"streak"`
	// Rerun is the noisy points: re-run, not scored.
	Rerun int `json:"rerun"`
}

// Judge assesses one agent's points, oldest first. Only the points of the
// last point's context count (a context change starts a new baseline);
// noisy points are left out.
func Judge(points []Point, o Options) (Assessment, error) {
	o = o.withDefaults()
	if len(points) == 0 {
		return Assessment{}, fmt.Errorf("canary: no points")
	}
	last := points[len(points)-1]
	a := Assessment{Agent: last.Agent, Fingerprint: last.Fingerprint, Context: last.Context, State: Baselining}
	quiet := a.currentQuiet(points)
	a.Median = Median(scores(quiet))
	if len(quiet) < o.Baseline {
		return a, nil
	}
	base := scores(quiet[:o.Baseline])
	a.Baseline = Baseline{Median: Median(base), MAD: MAD(base), N: len(base)}
	for _, p := range quiet[o.Baseline:] {
		a.Scored = append(a.Scored, a.Baseline.score(p, o))
	}
	a.Streak = streak(a.Scored)
	a.State = OK
	if a.Streak >= o.Persistence {
		a.State = Drift
	}
	return a, nil
}

// currentQuiet is the quiet points of the trailing run of points in the
// last point's context, counting the noisy ones it leaves out.
func (a *Assessment) currentQuiet(points []Point) []Point {
	key := a.Context.Key()
	start := len(points)
	for start > 0 && points[start-1].Context.Key() == key {
		start--
	}
	var quiet []Point
	for _, p := range points[start:] {
		if p.Noisy {
			a.Rerun++
			continue
		}
		quiet = append(quiet, p)
	}
	return quiet
}

func (b Baseline) score(p Point, o Options) Scored {
	s := Scored{Point: p, Z: RobustZ(p.Score, b.Median, b.MAD)}
	if b.Median != 0 {
		s.Change = (p.Score - b.Median) / b.Median
	}
	s.Outlier = math.Abs(s.Z) >= o.Z && math.Abs(s.Change) >= o.Floor
	return s
}

// streak counts the trailing outliers on the same side of the baseline.
func streak(s []Scored) int {
	n := 0
	for i := len(s) - 1; i >= 0 && s[i].Outlier; i-- {
		if n > 0 && math.Signbit(s[i].Change) != math.Signbit(s[len(s)-1].Change) {
			break
		}
		n++
	}
	return n
}

func scores(ps []Point) []float64 {
	out := make([]float64, len(ps))
	for i, p := range ps {
		out[i] = p.Score
	}
	return out
}
