package canary

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// series is quiet points around 1.000 s with a little jitter, then tail.
func series(n int, tail ...float64) []Point {
	rng := rand.New(rand.NewPCG(7, 7))
	var out []Point
	for i := range n {
		out = append(out, Point{At: t0.Add(time.Duration(i) * time.Hour), Seconds: 1 + 0.002*(rng.Float64()-0.5), Quiet: true})
	}
	for i, s := range tail {
		out = append(out, Point{At: t0.Add(time.Duration(n+i) * time.Hour), Seconds: s, Quiet: true})
	}
	return out
}

func TestJudge(t *testing.T) {
	t.Parallel()
	noisy := series(10)
	for i := range noisy {
		noisy[i].Quiet = i < 5
	}
	noisy = append(noisy, Point{Seconds: 1.1, Quiet: true}, Point{Seconds: 1.1, Quiet: true})
	for _, tc := range []struct {
		name   string
		h      []Point
		drift  bool
		reason string
	}{
		{"two slow points in a row", series(12, 1.05, 1.06), true, "off the baseline"},
		{"one slow point", series(12, 1.0, 1.06), false, "within"},
		{"slow then fast", series(12, 1.06, 0.94), false, "turned"},
		{"far in z but under the 2 % floor", series(12, 1.012, 1.012), false, "within"},
		{"too few quiet points", series(7, 1.1, 1.1), false, "7 quiet points, 8 needed"},
		{"noisy points make no baseline", noisy, false, "5 quiet points"},
		{"faster counts too", series(12, 0.9, 0.9), true, "-10.0 %"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			v := Judge(tc.h, Policy{})
			if v.Drift != tc.drift || !strings.Contains(v.Reason, tc.reason) {
				t.Errorf("drift %v (%s), want %v with %q", v.Drift, v.Reason, tc.drift, tc.reason)
			}
		})
	}
}

func TestRobustStatistics(t *testing.T) {
	t.Parallel()
	xs := []float64{1, 2, 3, 4, 100}
	if Median(xs) != 3 || MAD(xs) != 1 {
		t.Errorf("median %g MAD %g, want 3 and 1 (the outlier moves neither)", Median(xs), MAD(xs))
	}
	if z := modifiedZ(5, 3, 1); math.Abs(z-1.349) > 1e-9 {
		t.Errorf("modified z %g, want 0.6745*2", z)
	}
}

func TestOffsets(t *testing.T) {
	t.Parallel()
	latest := map[string]float64{"a": 1.0, "b": 1.0, "c": 1.1, "d": 2.0}
	fp := map[string]string{"a": "H100/550", "b": "H100/550", "c": "H100/550", "d": "MI300/6.2"}
	off := Offsets(latest, fp)
	if math.Abs(off["c"]-0.1) > 1e-9 || off["a"] != 0 {
		t.Errorf("offsets %v, want c +10 %% of its peers' median, a 0", off)
	}
	if _, ok := off["d"]; ok {
		t.Error("an agent alone in its fingerprint got an offset")
	}
}

// TestEDivisive: a step in the mean is found where it is, significant; a
// flat noisy series has no significant change.
func TestEDivisive(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 3))
	var step, flat []float64
	for i := range 40 {
		noise := 0.01 * rng.NormFloat64()
		flat = append(flat, 1+noise)
		if i < 25 {
			step = append(step, 1+noise)
		} else {
			step = append(step, 1.05+noise)
		}
	}
	cp := EDivisive(step, 199, 0.05)
	if !cp.Found || cp.Index != 25 {
		t.Errorf("step: %+v, want a change at 25", cp)
	}
	if cp := EDivisive(flat, 199, 0.05); cp.Found {
		t.Errorf("flat: %+v, want none", cp)
	}
	if cp := EDivisive(flat[:5], 10, 0.05); cp.Found || cp.P != 1 {
		t.Errorf("too short: %+v", cp)
	}
}
