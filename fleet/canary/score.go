package canary

import (
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/gpu-mode/kbgen/payload"
)

// maxBenchmarks bounds the cases one score is made of: the result is the
// container's to write (vouched, yet its numbers are the submission's).
const maxBenchmarks = 64

// ScoredRuns are the runs a score is taken from, first found first:
// Kernelbot's leaderboard run (ranked modes), else its benchmark run.
var ScoredRuns = []string{"leaderboard", "benchmark"}

// ErrNoScore is a result without a benchmark to score: a failed run.
var ErrNoScore = errors.New("canary: the result has no passed benchmark to score")

// ResultError is a passed run whose benchmark results cannot be scored
// (a count or a mean missing or out of range): the runner's protocol was
// broken, not the run. Key is the result key at fault, Value what it held.
type ResultError struct{ Key, Value string }

func (e *ResultError) Error() string {
	if e.Key == "benchmark-count" {
		return fmt.Sprintf("canary: benchmark-count %q is not 1 to %d", e.Value, maxBenchmarks)
	}
	return fmt.Sprintf("canary: %s %q is not a positive number", e.Key, e.Value)
}

// Score is a result's one number: the geometric mean of its benchmarks'
// means ("benchmark.N.mean", Kernelbot's protocol), the mean Kernelbot
// ranks leaderboards by. Every mean must be a positive finite number (else
// a *ResultError); a failed run is ErrNoScore.
func Score(res *payload.FullResult) (float64, error) {
	if res == nil || !res.Success {
		return 0, ErrNoScore
	}
	for _, key := range ScoredRuns {
		r, ok := res.Runs[key]
		if !ok || r.Run == nil || !r.Run.Passed {
			continue
		}
		return geomeanOfMeans(r.Run.Result)
	}
	return 0, ErrNoScore
}

func geomeanOfMeans(kv map[string]string) (float64, error) {
	n, err := strconv.Atoi(kv["benchmark-count"])
	if err != nil || n < 1 || n > maxBenchmarks {
		return 0, &ResultError{Key: "benchmark-count", Value: kv["benchmark-count"]}
	}
	var logs, only float64
	for i := range n {
		key := fmt.Sprintf("benchmark.%d.mean", i)
		m, err := strconv.ParseFloat(kv[key], 64)
		if err != nil || !(m > 0) || math.IsInf(m, 0) {
			return 0, &ResultError{Key: key, Value: kv[key]}
		}
		logs, only = logs+math.Log(m), m
	}
	if n == 1 {
		return only, nil // exp(log(m)) need not give m back
	}
	return math.Exp(logs / float64(n)), nil
}
