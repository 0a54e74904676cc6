package canary

import (
	"math"
	"math/rand/v2"
)

// ChangePoint is where a series changes distribution, found by the
// E-divisive method (Matteson and James, 2014, "A Nonparametric Approach
// for Multiple Change Point Analysis of Multivariate Data", with alpha 1):
// the split maximizing the energy statistic between the two sides, kept
// when a permutation test finds it significant.
type ChangePoint struct {
	Index int     // the first point after the change
	Stat  float64 // the energy statistic at Index
	P     float64 // the permutation test's p-value
	Found bool    // P below the significance asked
}

// MinSegment is the fewest points on either side of a change.
const MinSegment = 4

// EDivisive finds the most likely single change point in xs and tests it
// with perms permutations (a fixed seed: the same series, the same
// answer), at significance alpha.
func EDivisive(xs []float64, perms int, alpha float64) ChangePoint {
	if len(xs) < 2*MinSegment {
		return ChangePoint{P: 1}
	}
	best, stat := bestSplit(xs)
	rng := rand.New(rand.NewPCG(1, uint64(len(xs))))
	shuffled := append([]float64(nil), xs...)
	over := 0
	for range perms {
		rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
		if _, s := bestSplit(shuffled); s >= stat {
			over++
		}
	}
	p := float64(over+1) / float64(perms+1)
	return ChangePoint{Index: best, Stat: stat, P: p, Found: p < alpha}
}

// bestSplit is the split tau (MinSegment <= tau <= n-MinSegment)
// maximizing Q(tau) = tau(n-tau)/n · (2·E|X-Y| - E|X-X'| - E|Y-Y'|).
func bestSplit(xs []float64) (int, float64) {
	n := len(xs)
	best, stat := 0, math.Inf(-1)
	for tau := MinSegment; tau <= n-MinSegment; tau++ {
		left, right := xs[:tau], xs[tau:]
		between := meanAbsDiff(left, right)
		q := float64(tau*(n-tau)) / float64(n) * (2*between - withinMean(left) - withinMean(right))
		if q > stat {
			best, stat = tau, q
		}
	}
	return best, stat
}

func meanAbsDiff(a, b []float64) float64 {
	sum := 0.0
	for _, x := range a {
		for _, y := range b {
			sum += math.Abs(x - y)
		}
	}
	return sum / float64(len(a)*len(b))
}

// withinMean is E|X-X'| over the distinct pairs of a.
func withinMean(a []float64) float64 {
	if len(a) < 2 {
		return 0
	}
	sum := 0.0
	for i := range a {
		for j := i + 1; j < len(a); j++ {
			sum += math.Abs(a[i] - a[j])
		}
	}
	return sum / float64(len(a)*(len(a)-1)/2)
}
