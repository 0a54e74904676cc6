package canary

import (
	"math"
	"math/rand/v2"
	"slices"
)

// ChangeOptions tune ChangePoints; zero fields take the defaults.
type ChangeOptions struct {
	// MinSize is the fewest points a segment keeps (default 5).
	MinSize int
	// Alpha is the distance's exponent, in (0, 2) (default 1).
	Alpha float64
	// Permutations is the permutation test's size (default 199).
	Permutations int
	// Significance is the largest p-value accepted (default 0.05).
	Significance float64
	// Seed makes the permutations, and so the answer, reproducible.
	Seed uint64
}

func (o ChangeOptions) withDefaults() ChangeOptions {
	if o.MinSize <= 1 {
		o.MinSize = 5
	}
	if o.Alpha <= 0 || o.Alpha >= 2 {
		o.Alpha = 1
	}
	if o.Permutations <= 0 {
		o.Permutations = 199
	}
	if o.Significance <= 0 {
		o.Significance = 0.05
	}
	return o
}

// ChangePoints finds the change points of series xs by E-divisive
// (Matteson & James, "A Nonparametric Approach for Multiple Change Point
// Analysis of Multivariate Data", JASA 109(505), 2014), the method MongoDB
// runs on its performance tests (Daly et al., "The Use of Change Point
// Detection to Identify Software Performance Regressions in a Continuous
// Integration System", ICPE 2020). Segments are bisected one at a time at
// the split that maximises the divergence statistic Q̂ (with κ fixed at
// the segment's end, as MongoDB's implementation does); each new split is
// kept only if a permutation test (points shuffled within their current
// segments) gives p ≤ Significance. It returns each change point as the
// index of the first point of a new segment, ascending.
func ChangePoints(xs []float64, o ChangeOptions) []int {
	o = o.withDefaults()
	rng := rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	bounds := []int{0, len(xs)}
	for {
		tau, q := bestAcross(xs, bounds, o)
		if tau < 0 || !significant(xs, bounds, q, o, rng) {
			break
		}
		bounds = append(bounds, tau)
		slices.Sort(bounds)
	}
	return bounds[1 : len(bounds)-1]
}

// bestAcross is the best split over all segments, or -1 when none is
// long enough to split.
func bestAcross(xs []float64, bounds []int, o ChangeOptions) (int, float64) {
	tau, best := -1, math.Inf(-1)
	for i := 0; i+1 < len(bounds); i++ {
		a, b := bounds[i], bounds[i+1]
		t, q := bestSplit(xs[a:b], o.MinSize, o.Alpha)
		if t >= 0 && q > best {
			tau, best = a+t, q
		}
	}
	return tau, best
}

// significant runs the permutation test: how often does shuffling each
// segment give a best split at least as strong as q?
func significant(xs []float64, bounds []int, q float64, o ChangeOptions, rng *rand.Rand) bool {
	perm := slices.Clone(xs)
	atLeast := 0
	for r := 0; r < o.Permutations; r++ {
		for i := 0; i+1 < len(bounds); i++ {
			seg := perm[bounds[i]:bounds[i+1]]
			rng.Shuffle(len(seg), func(a, b int) { seg[a], seg[b] = seg[b], seg[a] })
		}
		if _, pq := bestAcross(perm, bounds, o); pq >= q {
			atLeast++
		}
	}
	p := float64(atLeast+1) / float64(o.Permutations+1)
	return p <= o.Significance
}

// bestSplit is the split τ of seg (both sides at least minSize) that
// maximises Q̂(τ) = m·k/(m+k) · (2/(m·k)·B − W_L/C(m,2) − W_R/C(k,2)),
// B the sum of distances across the split and W_L, W_R within each side.
// Moving τ by one moves one point across, so all τ cost O(n²) together.
func bestSplit(seg []float64, minSize int, alpha float64) (int, float64) {
	n := len(seg)
	if n < 2*minSize {
		return -1, 0
	}
	d := distances(seg, alpha)
	var wl, wr, b float64
	for i := 0; i < n; i++ {
		for j := i + 1; j < n; j++ {
			switch {
			case j < minSize:
				wl += d[i][j]
			case i >= minSize:
				wr += d[i][j]
			default:
				b += d[i][j]
			}
		}
	}
	bestT, bestQ := -1, math.Inf(-1)
	for t := minSize; t <= n-minSize; t++ {
		if t > minSize {
			left, right := rowSums(d[t-1], t-1)
			wl, wr, b = wl+left, wr-right, b-left+right
		}
		if q := qhat(t, n-t, b, wl, wr); q > bestQ {
			bestT, bestQ = t, q
		}
	}
	return bestT, bestQ
}

// rowSums is row's sum before index p and after it.
func rowSums(row []float64, p int) (before, after float64) {
	for j, v := range row {
		if j < p {
			before += v
		} else if j > p {
			after += v
		}
	}
	return before, after
}

func qhat(m, k int, b, wl, wr float64) float64 {
	fm, fk := float64(m), float64(k)
	e := 2*b/(fm*fk) - 2*wl/(fm*(fm-1)) - 2*wr/(fk*(fk-1))
	return fm * fk / (fm + fk) * e
}

func distances(xs []float64, alpha float64) [][]float64 {
	d := make([][]float64, len(xs))
	for i := range xs {
		d[i] = make([]float64, len(xs))
		for j := range xs {
			d[i][j] = math.Abs(xs[i] - xs[j])
			if alpha != 1 {
				d[i][j] = math.Pow(d[i][j], alpha)
			}
		}
	}
	return d
}
