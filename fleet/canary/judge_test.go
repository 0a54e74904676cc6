package canary

import (
	"math"
	"slices"
	"testing"
	"time"
)

var (
	ctxA = Context{Driver: "550.54", ImageDigest: "sha256:aa", KbgenVersion: "v1", CPUModel: "EPYC", PowerLimit: "700 W"}
	ctxB = Context{Driver: "560.10", ImageDigest: "sha256:aa", KbgenVersion: "v1", CPUModel: "EPYC", PowerLimit: "700 W"}
	// ctxP is ctxA with the power limit lowered (nvidia-smi -pl 500).
	ctxP = Context{Driver: "550.54", ImageDigest: "sha256:aa", KbgenVersion: "v1", CPUModel: "EPYC", PowerLimit: "500 W"}
)

// quietBase is eight quiet scores around 10 ms: median 10, MAD 0.1·1.4826.
var quietBase = []float64{10.0, 10.1, 9.9, 10.0, 10.2, 9.8, 10.1, 9.9}

// pts makes one agent's series in ctx, a minute apart; a negative score
// is a noisy point of that magnitude.
func pts(ctx Context, scores ...float64) []Point {
	out := make([]Point, len(scores))
	for i, s := range scores {
		out[i] = Point{Agent: "h-gpu0", Fingerprint: "H100/EPYC", Context: ctx, Score: math.Abs(s), Noisy: s < 0,
			At: time.Unix(0, 0).Add(time.Duration(i) * time.Minute)}
	}
	return out
}

func cat(xs ...[]float64) []float64 {
	var out []float64
	for _, x := range xs {
		out = append(out, x...)
	}
	return out
}

func TestJudge(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		points     []Point
		state      State
		streak     int
		rerun      int
		baseMedian float64
	}{
		{name: "seven quiet points are not a baseline", points: pts(ctxA, quietBase[:7]...), state: Baselining},
		{name: "steady", points: pts(ctxA, cat(quietBase, []float64{10.1, 9.9})...), state: OK, baseMedian: 10},
		{name: "two slow canaries drift", points: pts(ctxA, cat(quietBase, []float64{10.6, 10.7})...), state: Drift, streak: 2, baseMedian: 10},
		{name: "two fast canaries drift", points: pts(ctxA, cat(quietBase, []float64{9.4, 9.3})...), state: Drift, streak: 2, baseMedian: 10},
		{name: "one is not persistent", points: pts(ctxA, cat(quietBase, []float64{10.0, 10.7})...), state: OK, streak: 1, baseMedian: 10},
		{name: "opposite sides are not a streak", points: pts(ctxA, cat(quietBase, []float64{9.3, 10.7})...), state: OK, streak: 1, baseMedian: 10},
		{name: "a recovered agent is ok", points: pts(ctxA, cat(quietBase, []float64{10.7, 10.7, 10.0})...), state: OK, baseMedian: 10},
		{name: "very quiet agent, 1 % is under the floor", points: pts(ctxA, 10, 10, 10, 10, 10, 10, 10, 10.001, 10.1, 10.1), state: OK, baseMedian: 10},
		{name: "noisy agent, 5 % is within its z", points: pts(ctxA, 9, 11, 10, 8.8, 11.2, 10, 9.5, 10.5, 10.5, 10.5), state: OK, baseMedian: 10},
		{name: "zero MAD: the floor decides", points: pts(ctxA, 10, 10, 10, 10, 10, 10, 10, 10, 10.5, 10.5), state: Drift, streak: 2, baseMedian: 10},
		{name: "noisy canaries are re-run, not scored", points: pts(ctxA, cat(quietBase, []float64{-12, -12})...), state: OK, rerun: 2, baseMedian: 10},
		// The noisy point is skipped: the next quiet one is the baseline's
		// eighth, and only the last is scored.
		{name: "noisy points do not fill the baseline", points: pts(ctxA, cat(quietBase[:7], []float64{-12, 10.7, 10.7})...), state: OK, streak: 1, rerun: 1, baseMedian: 10.05},
		{name: "a context change starts a new baseline", points: append(pts(ctxA, quietBase...), pts(ctxB, 11, 11.1, 10.9)...), state: Baselining},
		{name: "a power limit change starts a new baseline, not drift", points: append(pts(ctxA, quietBase...), pts(ctxP, 12, 12.1)...), state: Baselining},
		{name: "the new context's own baseline", points: append(pts(ctxA, quietBase...), pts(ctxB, 11, 11.1, 10.9, 11, 11.2, 10.8, 11.1, 10.9, 11, 11)...), state: OK, baseMedian: 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := Judge(tc.points, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if a.State != tc.state || a.Streak != tc.streak || a.Rerun != tc.rerun {
				t.Errorf("state %s streak %d rerun %d, want %s %d %d (scored %+v)", a.State, a.Streak, a.Rerun, tc.state, tc.streak, tc.rerun, a.Scored)
			}
			if tc.state != Baselining && math.Abs(a.Baseline.Median-tc.baseMedian) > 1e-9 {
				t.Errorf("baseline median %v, want %v", a.Baseline.Median, tc.baseMedian)
			}
		})
	}
}

func TestJudgeNoPoints(t *testing.T) {
	t.Parallel()
	if _, err := Judge(nil, Options{}); err == nil {
		t.Fatal("Judge(nil) gave no error")
	}
}

func TestJudgeOptions(t *testing.T) {
	t.Parallel()
	series := pts(ctxA, cat(quietBase, []float64{10.6, 10.7})...)
	for _, tc := range []struct {
		name  string
		o     Options
		state State
	}{
		{"persistence 3 waits", Options{Persistence: 3}, OK},
		{"floor 10 % ignores 7 %", Options{Floor: 0.10}, OK},
		{"a baseline under 8 is 8", Options{Baseline: 3}, Drift},
		{"a baseline of 9 takes the first canary in", Options{Baseline: 9}, OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, _ := Judge(series, tc.o)
			if a.State != tc.state {
				t.Errorf("state %s, want %s", a.State, tc.state)
			}
		})
	}
}

func TestOffsets(t *testing.T) {
	t.Parallel()
	as := []Assessment{
		{Agent: "a", Fingerprint: "H100", State: OK, Median: 10},
		{Agent: "b", Fingerprint: "H100", State: OK, Median: 10},
		{Agent: "c", Fingerprint: "H100", State: Drift, Median: 11},
		{Agent: "d", Fingerprint: "MI300X", State: OK, Median: 7},
		{Agent: "e", Fingerprint: "H100", State: Baselining, Median: 50},
		{Agent: "f", Fingerprint: "H100", State: OK, Median: 10.1},
		{Agent: "g", Fingerprint: "H100", State: OK, Median: 10},
		{Agent: "h", Fingerprint: "B200", State: OK, Median: 10},
		{Agent: "i", Fingerprint: "B200", State: OK, Median: 11},
		// 3 % off: past the drift floor, within the offset floor (5 %).
		{Agent: "j", Fingerprint: "L40S", State: OK, Median: 10.3},
		{Agent: "k", Fingerprint: "L40S", State: OK, Median: 10},
		{Agent: "l", Fingerprint: "L40S", State: OK, Median: 10},
	}
	got := Offsets(as, Options{})
	want := map[string]Offset{
		"a": {Agent: "a", Fingerprint: "H100", Median: 10, PeerMedian: 10, Change: 0, Peers: 5},
		"b": {Agent: "b", Fingerprint: "H100", Median: 10, PeerMedian: 10, Change: 0, Peers: 5},
		"c": {Agent: "c", Fingerprint: "H100", Median: 11, PeerMedian: 10, Change: 0.1, Peers: 5, Off: true},
		// 1 % off: within the default offset floor, not a verdict.
		"f": {Agent: "f", Fingerprint: "H100", Median: 10.1, PeerMedian: 10, Change: 0.01, Peers: 5},
		"g": {Agent: "g", Fingerprint: "H100", Median: 10, PeerMedian: 10, Change: 0, Peers: 5},
		// Identical parts differ by a few percent: 3 % is no verdict under
		// the default offset floor, though past the drift floor.
		"j": {Agent: "j", Fingerprint: "L40S", Median: 10.3, PeerMedian: 10, Change: 0.03, Peers: 3},
		"k": {Agent: "k", Fingerprint: "L40S", Median: 10, PeerMedian: 10, Change: 0, Peers: 3},
		"l": {Agent: "l", Fingerprint: "L40S", Median: 10, PeerMedian: 10, Change: 0, Peers: 3},
		// Two agents 10 % apart: each is 4.8 % off their median, but which
		// one is slow is not known: no verdict.
		"h": {Agent: "h", Fingerprint: "B200", Median: 10, PeerMedian: 10.5, Change: -0.5 / 10.5, Peers: 2},
		"i": {Agent: "i", Fingerprint: "B200", Median: 11, PeerMedian: 10.5, Change: 0.5 / 10.5, Peers: 2},
		"d": {Agent: "d", Fingerprint: "MI300X", Median: 7, PeerMedian: 7, Change: 0, Peers: 1},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d offsets, want %d: %+v", len(got), len(want), got)
	}
	for _, o := range got {
		w := want[o.Agent]
		if math.Abs(o.Change-w.Change) > 1e-9 {
			t.Errorf("%s: change %v, want %v", o.Agent, o.Change, w.Change)
		}
		o.Change = w.Change
		if o != w {
			t.Errorf("%s: %+v, want %+v", o.Agent, o, w)
		}
	}
	// An offset floor of 20 % judges c's 10 % no offset; the drift
	// floor has no say in it.
	for _, o := range Offsets(as, Options{OffsetFloor: 0.2, Floor: 0.01}) {
		if o.Off {
			t.Errorf("offset floor 20 %%: %s judged off at %v", o.Agent, o.Change)
		}
	}
	// An offset floor of 2 % judges j's 3 % off, and only c and j.
	var off []string
	for _, o := range Offsets(as, Options{OffsetFloor: 0.02}) {
		if o.Off {
			off = append(off, o.Agent)
		}
	}
	if !slices.Equal(off, []string{"c", "j"}) {
		t.Errorf("offset floor 2 %%: off %v, want [c j]", off)
	}
}
