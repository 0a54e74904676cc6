package canary

import (
	"math"
	"slices"
)

// MADScale makes the median absolute deviation a consistent estimator of
// the standard deviation for normal data (1/Φ⁻¹(3/4) ≈ 1.4826; Rousseeuw
// & Croux 1993), so a robust z reads like an ordinary one.
const MADScale = 1.4826

// Median is the median of xs (NaN for none); xs is not changed.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// MAD is the scaled median absolute deviation of xs around their median.
func MAD(xs []float64) float64 {
	m := Median(xs)
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - m)
	}
	return MADScale * Median(dev)
}

// RobustZ is x's distance from median in scaled MADs. A zero MAD (a
// baseline of identical points) makes any difference infinite and no
// difference 0: the material floor then decides alone.
func RobustZ(x, median, mad float64) float64 {
	d := x - median
	if mad > 0 {
		return d / mad
	}
	switch {
	case d > 0:
		return math.Inf(1)
	case d < 0:
		return math.Inf(-1)
	}
	return 0
}
