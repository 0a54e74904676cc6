package verify

import "time"

// Record is one verification as kept across a restart (fleet/store's
// verifications table, as JSON): everything Judge needs. The original's
// measurement is taken when the verification starts, so a restarted
// service, which no longer holds the original's payload or result, judges
// it the same; each re-run's measurement is kept once the re-run is done.
type Record struct {
	RunID     string      `json:"run_id"`
	Queue     string      `json:"queue"`
	StartedAt time.Time   `json:"started_at"`
	Original  Measurement `json:"original"`
	// Reruns name each re-run (RunID, Agent); a done one (Done) carries
	// its measurement, final.
	Reruns []Measurement `json:"reruns"`
	Want   int           `json:"want"`
	Bound  float64       `json:"bound"`
}

// Report judges the record with the re-runs' measurements now: a re-run
// done in the record keeps its kept measurement; now gives the others'
// (not done: Done false).
func (rec Record) Report(now func(Measurement) Measurement) Report {
	ms := make([]Measurement, len(rec.Reruns))
	for i, m := range rec.Reruns {
		if m.Done {
			ms[i] = m
		} else {
			ms[i] = now(m)
		}
	}
	return Judge(rec.Original, ms, rec.Want, rec.Bound)
}

// Pending is whether a re-run is still to be measured.
func (rec Record) Pending() bool {
	for _, m := range rec.Reruns {
		if !m.Done {
			return true
		}
	}
	return false
}
