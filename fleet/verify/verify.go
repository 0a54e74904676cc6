// Package verify re-measures a finished run: the same payload on other
// agents of the run's hardware fingerprint, so that a new leaderboard
// record is confirmed before it is announced. It picks the agents
// (Pick), and judges the re-measurements (Judge): the spread of the
// scores against the bound a clean noise record vouches for (Bound).
// Pure: serve submits the runs and feeds the results in.
package verify

import (
	"errors"
	"fmt"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"math"
	"slices"

	"github.com/gpu-mode/kbgen/fleet/canary"
)

// Limits on one verification's re-runs.
const (
	DefaultCount = 3
	MaxCount     = 8
)

// Verdicts.
const (
	Confirmed    = "confirmed"    // every re-run clean, the spread within the bound
	Disputed     = "disputed"     // the spread beyond the bound
	Inconclusive = "inconclusive" // too few clean re-runs on the same hardware
	Running      = "running"      // re-runs still under way
)

// Bound is the largest relative spread a clean noise record vouches for
// under policy p: a clean record says the run lost at most
// max_steal_percent of its CPU time to the hypervisor and
// max_foreign_percent to foreign processes, so two clean runs of one job
// on one kind of machine may differ by that much for reasons outside the
// job (6 % under the default policy).
func Bound(p noisepolicy.Policy) float64 {
	p = p.WithDefaults()
	return (p.MaxStealPercent + p.MaxForeignPercent) / 100
}

// Candidate is an agent a re-run could go to.
type Candidate struct {
	Agent string
	// Fingerprint is the agent's hardware as its last canary saw it; ""
	// when not known (its re-run's own result then says).
	Fingerprint string
}

// ErrNoAgents is a verification with no other agent to run on.
var ErrNoAgents = errors.New("verify: no other available agent of the run's hardware")

// Pick chooses up to n agents other than the run's own: those known to
// share its fingerprint first, then those not known; never one known to
// differ. Order within each group is the candidates' (the caller's
// preference, e.g. idle first).
func Pick(cands []Candidate, own, fingerprint string, n int) ([]string, error) {
	var same, unknown []string
	for _, c := range cands {
		switch {
		case c.Agent == own:
		case c.Fingerprint == fingerprint:
			same = append(same, c.Agent)
		case c.Fingerprint == "":
			unknown = append(unknown, c.Agent)
		}
	}
	out := append(same, unknown...)
	if len(out) == 0 {
		return nil, fmt.Errorf("%w (%s; the run ran on %s)", ErrNoAgents, fingerprint, own)
	}
	return out[:min(n, len(out))], nil
}

// Measurement is one run's score on one agent.
type Measurement struct {
	RunID       string  `json:"run_id"`
	Agent       string  `json:"agent,omitempty"`
	Fingerprint string  `json:"fingerprint,omitempty"`
	Score       float64 `json:"score,omitempty"`
	Noisy       bool    `json:"noisy,omitempty"`
	// Error says why the run has no score (it failed, or has no facts).
	Error string `json:"error,omitempty"`
	// Done is false while the run is under way.
	Done bool `json:"done"`
}

// FromPoint is a canary.Point (canary.PointFrom of a run) as a
// measurement.
func FromPoint(p canary.Point, err error) Measurement {
	m := Measurement{RunID: p.RunID, Agent: p.Agent, Fingerprint: p.Fingerprint, Score: p.Score, Noisy: p.Noisy, Done: true}
	if err != nil {
		m.Error = err.Error()
	}
	return m
}

// usable is a clean, scored measurement on the original's hardware.
func (m Measurement) usable(fingerprint string) bool {
	return m.Done && m.Error == "" && !m.Noisy && m.Score > 0 && m.Fingerprint == fingerprint
}

// Report is one verification.
type Report struct {
	RunID    string        `json:"run_id"`
	Original Measurement   `json:"original"`
	Reruns   []Measurement `json:"reruns"`
	// Want is how many re-runs were asked for.
	Want int `json:"want"`
	// Spread is (max − min) / median of the original's and the usable
	// re-runs' scores; Bound the noise record's (Bound).
	Spread  float64 `json:"spread"`
	Bound   float64 `json:"bound"`
	Verdict string  `json:"verdict"`
	// Why explains an inconclusive or disputed verdict.
	Why string `json:"why,omitempty"`
}

// Judge decides a verification: Running until every re-run is done;
// Inconclusive with fewer than want usable re-runs (noisy, failed, or on
// other hardware); else Confirmed when the spread is within the bound,
// Disputed when not.
func Judge(orig Measurement, reruns []Measurement, want int, bound float64) Report {
	r := Report{RunID: orig.RunID, Original: orig, Reruns: reruns, Want: want, Bound: bound}
	scores := []float64{orig.Score}
	for _, m := range reruns {
		if !m.Done {
			r.Verdict = Running
			return r
		}
		if m.usable(orig.Fingerprint) {
			scores = append(scores, m.Score)
		}
	}
	r.Spread = spread(scores)
	switch {
	case !orig.usable(orig.Fingerprint):
		r.Verdict, r.Spread = Inconclusive, 0
		r.Why = "the original run has no clean score to compare with"
	case len(scores)-1 < want:
		r.Verdict = Inconclusive
		r.Why = fmt.Sprintf("%d of %d re-runs were clean and scored on %s", len(scores)-1, want, orig.Fingerprint)
	case r.Spread <= bound:
		r.Verdict = Confirmed
	default:
		r.Verdict = Disputed
		r.Why = fmt.Sprintf("the scores spread %.1f %%, beyond the noise record's bound of %.1f %%", 100*r.Spread, 100*bound)
	}
	return r
}

func spread(xs []float64) float64 {
	m := canary.Median(xs)
	if len(xs) < 2 || m == 0 || math.IsNaN(m) {
		return 0
	}
	return (slices.Max(xs) - slices.Min(xs)) / m
}
