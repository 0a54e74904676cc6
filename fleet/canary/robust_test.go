package canary

import (
	"math"
	"testing"
)

func TestMedianMAD(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		xs       []float64
		med, mad float64
		medIsNaN bool
	}{
		{name: "odd", xs: []float64{3, 1, 2}, med: 2, mad: MADScale * 1},
		{name: "even", xs: []float64{4, 1, 3, 2}, med: 2.5, mad: MADScale * 1},
		{name: "outlier does not move it", xs: []float64{10, 10, 11, 9, 10, 1000}, med: 10, mad: MADScale * 0.5},
		{name: "identical", xs: []float64{5, 5, 5}, med: 5, mad: 0},
		{name: "empty", xs: nil, medIsNaN: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m := Median(tc.xs)
			if tc.medIsNaN {
				if !math.IsNaN(m) {
					t.Fatalf("Median = %v, want NaN", m)
				}
				return
			}
			if m != tc.med {
				t.Errorf("Median = %v, want %v", m, tc.med)
			}
			if got := MAD(tc.xs); math.Abs(got-tc.mad) > 1e-12 {
				t.Errorf("MAD = %v, want %v", got, tc.mad)
			}
		})
	}
}

func TestRobustZ(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name           string
		x, median, mad float64
		want           float64
	}{
		{"above", 13, 10, 1.5, 2},
		{"below", 7, 10, 1.5, -2},
		{"zero MAD above", 11, 10, 0, math.Inf(1)},
		{"zero MAD below", 9, 10, 0, math.Inf(-1)},
		{"zero MAD equal", 10, 10, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := RobustZ(tc.x, tc.median, tc.mad); got != tc.want {
				t.Errorf("RobustZ = %v, want %v", got, tc.want)
			}
		})
	}
}
