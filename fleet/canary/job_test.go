package canary

import (
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/payload"
)

// result is a passed result whose run key holds kv.
func result(key string, kv map[string]string) *payload.FullResult {
	return &payload.FullResult{Success: true, System: payload.SystemInfo{CPU: "AMD EPYC 9654"},
		Runs: map[string]payload.EvalResult{key: {Run: &payload.RunResult{Success: true, Passed: true, Result: kv}}}}
}

func TestScore(t *testing.T) {
	t.Parallel()
	two := map[string]string{"benchmark-count": "2", "benchmark.0.mean": "100", "benchmark.1.mean": "400"}
	failed := result("benchmark", two)
	failed.Success = false
	notPassed := result("benchmark", two)
	notPassed.Runs["benchmark"].Run.Passed = false
	both := result("benchmark", map[string]string{"benchmark-count": "1", "benchmark.0.mean": "7"})
	both.Runs["leaderboard"] = result("leaderboard", two).Runs["leaderboard"]
	for _, tc := range []struct {
		name string
		res  *payload.FullResult
		want float64
		err  error  // ErrNoScore, or a *ResultError of key
		key  string // the result key a *ResultError names
	}{
		{name: "geometric mean", res: result("benchmark", two), want: 200},
		{name: "one benchmark is its mean exactly", res: result("benchmark", map[string]string{"benchmark-count": "1", "benchmark.0.mean": "1000"}), want: 1000},
		{name: "the leaderboard run first", res: both, want: 200},
		{name: "nil", res: nil, err: ErrNoScore},
		{name: "failed", res: failed, err: ErrNoScore},
		{name: "not passed", res: notPassed, err: ErrNoScore},
		{name: "no count", res: result("benchmark", map[string]string{"benchmark.0.mean": "1"}), key: "benchmark-count"},
		{name: "count too large", res: result("benchmark", map[string]string{"benchmark-count": "65"}), key: "benchmark-count"},
		{name: "a mean missing", res: result("benchmark", map[string]string{"benchmark-count": "2", "benchmark.0.mean": "1"}), key: "benchmark.1.mean"},
		{name: "a zero mean", res: result("benchmark", map[string]string{"benchmark-count": "1", "benchmark.0.mean": "0"}), key: "benchmark.0.mean"},
		{name: "NaN", res: result("benchmark", map[string]string{"benchmark-count": "1", "benchmark.0.mean": "NaN"}), key: "benchmark.0.mean"},
		{name: "infinite", res: result("benchmark", map[string]string{"benchmark-count": "1", "benchmark.0.mean": "+Inf"}), key: "benchmark.0.mean"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Score(tc.res)
			if tc.err != nil {
				if !errors.Is(err, tc.err) {
					t.Fatalf("Score = %v, %v; want %v", got, err, tc.err)
				}
				return
			}
			if tc.key != "" {
				var re *ResultError
				if !errors.As(err, &re) || re.Key != tc.key || re.Value != tc.res.Runs["benchmark"].Run.Result[tc.key] {
					t.Fatalf("Score = %v, %v; want a ResultError of %s", got, err, tc.key)
				}
				return
			}
			if err != nil || math.Abs(got-tc.want) > 1e-9 || (tc.want == 1000 && got != 1000) {
				t.Fatalf("Score = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}

func TestPointFrom(t *testing.T) {
	t.Parallel()
	at := time.Unix(1700000000, 0)
	res := result("benchmark", map[string]string{"benchmark-count": "1", "benchmark.0.mean": "1500"})
	facts := []runfacts.Facts{
		{Agent: "first-try", Noise: "clean"},
		{Agent: "node1-gpu0", GPUModel: "NVIDIA H100 80GB HBM3", Driver: "550.54.15", ImageDigest: "sha256:ab", KbgenVersion: "v1.2.0", Noise: "clean", PowerLimit: "700 W"},
	}
	p, err := PointFrom("kbgen-canary-node1-gpu0-1", res, facts, at)
	if err != nil {
		t.Fatal(err)
	}
	want := Point{Agent: "node1-gpu0", RunID: "kbgen-canary-node1-gpu0-1", At: at, Score: 1500,
		Context:     Context{Driver: "550.54.15", ImageDigest: "sha256:ab", KbgenVersion: "v1.2.0", CPUModel: "AMD EPYC 9654", PowerLimit: "700 W"},
		Fingerprint: "NVIDIA H100 80GB HBM3 / AMD EPYC 9654"}
	if p != want {
		t.Errorf("PointFrom =\n%+v\nwant\n%+v", p, want)
	}

	t.Run("noisy: a point to re-run, even without a score", func(t *testing.T) {
		t.Parallel()
		noisy := []runfacts.Facts{{Agent: "a", Noise: NoisyVerdict}}
		p, err := PointFrom("c", &payload.FullResult{}, noisy, at)
		if err != nil || !p.Noisy {
			t.Fatalf("PointFrom = %+v, %v; want a noisy point", p, err)
		}
	})
	t.Run("a failed clean canary is an error", func(t *testing.T) {
		t.Parallel()
		if _, err := PointFrom("c", &payload.FullResult{}, []runfacts.Facts{{Agent: "a", Noise: "clean"}}, at); !errors.Is(err, ErrNoScore) {
			t.Fatalf("error %v, want ErrNoScore", err)
		}
	})
	t.Run("no facts: no agent", func(t *testing.T) {
		t.Parallel()
		if _, err := PointFrom("c", res, nil, at); !errors.Is(err, ErrNoFacts) {
			t.Fatalf("error %v, want ErrNoFacts", err)
		}
	})
}

func TestDue(t *testing.T) {
	t.Parallel()
	now := time.Unix(100000, 0)
	targets := []Target{{"b", "q"}, {"a", "q"}, {"c", "q"}, {"d", "q"}}
	last := map[string]time.Time{
		"a": now.Add(-7 * time.Hour),   // overdue
		"b": now.Add(-5 * time.Hour),   // not yet
		"c": now.Add(-6 * time.Hour),   // exactly due
		"x": now.Add(-100 * time.Hour), // not a target any more
	}
	var got []string
	for _, d := range Due(targets, last, 6*time.Hour, now) {
		got = append(got, d.Agent)
	}
	if want := []string{"a", "c", "d"}; !slices.Equal(got, want) {
		t.Errorf("Due = %v, want %v (d: never had one)", got, want)
	}
}

func TestRunID(t *testing.T) {
	t.Parallel()
	id := RunID("node1-gpu0", time.UnixMilli(1700000000123))
	if id != "kbgen-canary-node1-gpu0-1700000000123" || !IsCanary(id) || IsCanary("run-1") {
		t.Errorf("RunID = %q, IsCanary wrong", id)
	}
}
