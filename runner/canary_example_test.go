package runner

import (
	"testing"

	"github.com/gpu-mode/kbgen/fleet/canary"
	"github.com/gpu-mode/kbgen/payload"
)

// TestCalibrateExample: kbgen serve's default canary job (examples/calibrate,
// node qualify's CPU walk) passes in benchmark mode with a score the
// canary statistics read; a wrong checksum fails its check, so the walk is
// really done.
func TestCalibrateExample(t *testing.T) {
	needPython(t)
	for _, tc := range []struct {
		submission string
		passed     bool
	}{
		{"submission", true},
		{"wrong", false},
	} {
		t.Run(tc.submission, func(t *testing.T) {
			res, err := evaluate(t, example(t, "calibrate", tc.submission, payload.ModeBenchmark))
			if err != nil || !res.Success {
				t.Fatalf("runner failed: %v", err)
			}
			r := res.Runs["benchmark"].Run
			if r == nil || r.Passed != tc.passed {
				t.Fatalf("benchmark run %+v, want passed %v", r, tc.passed)
			}
			score, err := canary.Score(res)
			if tc.passed && (err != nil || score <= 0) {
				t.Errorf("score %v, %v; want a positive score", score, err)
			}
			if !tc.passed && err == nil {
				t.Errorf("a failed canary scored %v", score)
			}
		})
	}
}
