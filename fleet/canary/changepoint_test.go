package canary

import (
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// normal is n draws of N(mean, sd) from a fixed seed.
func normal(seed uint64, n int, mean, sd float64) []float64 {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([]float64, n)
	for i := range out {
		out[i] = mean + sd*r.NormFloat64()
	}
	return out
}

func TestChangePoints(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		xs   []float64
		want []int
	}{
		{name: "a step shift at 30", xs: cat(normal(1, 30, 10, 0.1), normal(2, 30, 11, 0.1)), want: []int{30}},
		{name: "a 3 % step in 1 % noise", xs: cat(normal(3, 40, 10, 0.1), normal(4, 40, 10.3, 0.1)), want: []int{40}},
		{name: "up and back down", xs: cat(normal(5, 20, 10, 0.1), normal(6, 20, 12, 0.1), normal(7, 20, 10, 0.1)), want: []int{20, 40}},
		{name: "flat noisy series", xs: normal(8, 60, 10, 1), want: nil},
		{name: "another flat noisy series", xs: normal(9, 120, 10, 0.5), want: nil},
		{name: "too short to split", xs: []float64{1, 1, 1, 9, 9, 9}, want: nil},
		{name: "empty", xs: nil, want: nil},
		// Ported from the statistics-only fleet/canary's TestEDivisive: a
		// 5 % step in 1 % noise at 25 of 40 is found where it is; the
		// same noise without the step, and 5 points, have none.
		{name: "a 5 % step at 25 of 40", xs: edivisiveSeries(true), want: []int{25}},
		{name: "the same noise without the step", xs: edivisiveSeries(false), want: nil},
		{name: "five points", xs: edivisiveSeries(false)[:5], want: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got := ChangePoints(tc.xs, ChangeOptions{Seed: 42})
			if !slices.Equal(got, tc.want) {
				t.Errorf("ChangePoints = %v, want %v", got, tc.want)
			}
		})
	}
}

// edivisiveSeries is 40 points of 1 % noise around 1, with a 5 % step
// from index 25 when step.
func edivisiveSeries(step bool) []float64 {
	rng := rand.New(rand.NewPCG(3, 3))
	var xs []float64
	for i := range 40 {
		x := 1 + 0.01*rng.NormFloat64()
		if step && i >= 25 {
			x += 0.05
		}
		xs = append(xs, x)
	}
	return xs
}

// TestBestSplitMatchesDefinition checks the O(n²) update against Q̂
// computed from its definition at every τ.
func TestBestSplitMatchesDefinition(t *testing.T) {
	t.Parallel()
	for _, alpha := range []float64{1, 0.5, 1.5} {
		xs := cat(normal(11, 17, 3, 1), normal(12, 9, 5, 2))
		gotT, gotQ := bestSplit(xs, 3, alpha)
		wantT, wantQ := -1, math.Inf(-1)
		for tau := 3; tau <= len(xs)-3; tau++ {
			if q := qDefinition(xs[:tau], xs[tau:], alpha); q > wantQ {
				wantT, wantQ = tau, q
			}
		}
		if gotT != wantT || math.Abs(gotQ-wantQ) > 1e-9*math.Abs(wantQ) {
			t.Errorf("alpha %v: bestSplit = (%d, %v), want (%d, %v)", alpha, gotT, gotQ, wantT, wantQ)
		}
	}
}

func qDefinition(x, y []float64, alpha float64) float64 {
	mean := func(a, b []float64, same bool) float64 {
		var s float64
		n := 0
		for i := range a {
			for j := range b {
				if same && j <= i {
					continue
				}
				s += math.Pow(math.Abs(a[i]-b[j]), alpha)
				n++
			}
		}
		return s / float64(n)
	}
	m, k := float64(len(x)), float64(len(y))
	return m * k / (m + k) * (2*mean(x, y, false) - mean(x, x, true) - mean(y, y, true))
}

// BenchmarkChangePoints is one agent's 30-day history at a canary every
// 6 hours (120 points) with one step: the cost the dashboard pays per
// agent.
func BenchmarkChangePoints(b *testing.B) {
	xs := cat(normal(1, 60, 10, 0.1), normal(2, 60, 10.5, 0.1))
	for b.Loop() {
		ChangePoints(xs, ChangeOptions{Seed: 1})
	}
}
