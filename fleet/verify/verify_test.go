package verify

import (
	"errors"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"math"
	"slices"
	"testing"
)

const fp = "NVIDIA H100 80GB HBM3 / AMD EPYC 9654"

func m(agent string, score float64) Measurement {
	return Measurement{RunID: "r-" + agent, Agent: agent, Fingerprint: fp, Score: score, Done: true}
}

func TestJudge(t *testing.T) {
	t.Parallel()
	orig := m("a", 100)
	noisy := m("c", 150)
	noisy.Noisy = true
	failed := m("d", 0)
	failed.Error = "no passed benchmark"
	other := m("e", 100)
	other.Fingerprint = "NVIDIA H100 / Intel"
	running := m("f", 0)
	running.Done = false
	dirty := orig
	dirty.Noisy = true
	for _, tc := range []struct {
		name   string
		orig   Measurement
		reruns []Measurement
		want   string
		spread float64
	}{
		{name: "within the bound", orig: orig, reruns: []Measurement{m("b", 102), m("c", 97), m("d", 101)}, want: Confirmed, spread: 0.05 / 1.005},
		{name: "beyond the bound", orig: orig, reruns: []Measurement{m("b", 110), m("c", 100), m("d", 101)}, want: Disputed, spread: 0.10 / 1.005},
		{name: "a noisy re-run does not count", orig: orig, reruns: []Measurement{m("b", 101), noisy, m("d", 100)}, want: Inconclusive, spread: 0.01},
		{name: "a failed re-run does not count", orig: orig, reruns: []Measurement{m("b", 101), failed, m("c", 100)}, want: Inconclusive, spread: 0.01},
		{name: "other hardware does not count", orig: orig, reruns: []Measurement{m("b", 101), other, m("c", 100)}, want: Inconclusive, spread: 0.01},
		{name: "still running", orig: orig, reruns: []Measurement{m("b", 101), running, m("c", 100)}, want: Running},
		{name: "a noisy original proves nothing", orig: dirty, reruns: []Measurement{m("b", 100), m("c", 100), m("d", 100)}, want: Inconclusive},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := Judge(tc.orig, tc.reruns, 3, 0.06)
			if r.Verdict != tc.want || math.Abs(r.Spread-tc.spread) > 1e-9 {
				t.Errorf("verdict %s spread %v (%s), want %s %v", r.Verdict, r.Spread, r.Why, tc.want, tc.spread)
			}
			if (r.Verdict == Inconclusive || r.Verdict == Disputed) && r.Why == "" {
				t.Error("no reason given")
			}
		})
	}
}

func TestPick(t *testing.T) {
	t.Parallel()
	cands := []Candidate{{"unknown1", ""}, {"a", fp}, {"other", "AMD MI300X / EPYC"}, {"same1", fp}, {"unknown2", ""}, {"same2", fp}}
	for _, tc := range []struct {
		name string
		n    int
		want []string
	}{
		{"known first", 2, []string{"same1", "same2"}},
		{"then unknown, never other hardware nor its own", 10, []string{"same1", "same2", "unknown1", "unknown2"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := Pick(cands, "a", fp, tc.n)
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("Pick = %v, %v; want %v", got, err, tc.want)
			}
		})
	}
	if _, err := Pick([]Candidate{{"a", fp}, {"other", "x"}}, "a", fp, 3); !errors.Is(err, ErrNoAgents) {
		t.Errorf("only itself and other hardware: %v, want ErrNoAgents", err)
	}
}

func TestBound(t *testing.T) {
	t.Parallel()
	if got := Bound(noisepolicy.Policy{}); math.Abs(got-0.06) > 1e-12 {
		t.Errorf("default bound %v, want 0.06", got)
	}
	if got := Bound(noisepolicy.Policy{MaxStealPercent: 2, MaxForeignPercent: 0.5}); math.Abs(got-0.025) > 1e-12 {
		t.Errorf("bound %v, want 0.025", got)
	}
}

// TestRecordReport: a kept re-run's measurement is final; only the
// others are asked for now.
func TestRecordReport(t *testing.T) {
	t.Parallel()
	rec := Record{Original: m("a", 100), Reruns: []Measurement{m("b", 101), {RunID: "r-c", Agent: "c"}}, Want: 2, Bound: 0.06}
	var asked []string
	rep := rec.Report(func(x Measurement) Measurement {
		asked = append(asked, x.RunID)
		return m("c", 99)
	})
	if !slices.Equal(asked, []string{"r-c"}) || rep.Verdict != Confirmed || !rec.Pending() {
		t.Errorf("asked %v, verdict %s, pending %v; want only r-c asked, confirmed, still pending in the record", asked, rep.Verdict, rec.Pending())
	}
	rec.Reruns[1] = m("c", 99)
	if rec.Pending() {
		t.Error("a record with every re-run done is pending")
	}
}
