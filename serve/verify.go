package serve

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/fleet/canary"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/fleet/verify"
)

// Re-measuring a record (package fleet/verify): POST /v1/runs/{id}/verify
// re-runs a finished run's payload on other agents of its hardware,
// GET /v1/runs/{id}/verify reports the spread against the noise record's
// bound. Kept in this file (and the routes in api.go).

// VerifyRequest is the body of POST /v1/runs/{id}/verify.
type VerifyRequest struct {
	// Count is how many re-runs (default verify.DefaultCount, at most
	// verify.MaxCount).
	Count int `json:"count,omitempty"`
}

// verifications are the runs being (or done being) re-measured, by run
// id; with a store each is kept there (fleet/store, migration 5) as it
// starts and as each re-run finishes, and restored at start (initVerify).
type verifications struct {
	mu    sync.Mutex
	byRun map[string]*verify.Record
}

// ErrNotVerifiable is a run that cannot be re-measured (not done, no
// clean score, payload not known): the answer is 409.
var ErrNotVerifiable = errors.New("cannot verify")

// Verify starts the re-measurement of run id on count other agents; a
// verification already started is returned as it is.
func (s *Service) Verify(id string, count int) (verify.Report, error) {
	s.verifs.mu.Lock()
	defer s.verifs.mu.Unlock()
	if v := s.verifs.byRun[id]; v != nil {
		return s.verifyReport(v), nil
	}
	r := s.runs.get(id)
	if r == nil {
		return verify.Report{}, fmt.Errorf("%w: no run %q", ErrNotVerifiable, id)
	}
	v, err := s.newVerification(r, min(max(count, 0), verify.MaxCount))
	if err != nil {
		return verify.Report{}, err
	}
	s.verifs.byRun[id] = v
	s.keepVerification(*v)
	return s.verifyReport(v), nil
}

// newVerification checks the run and submits its re-runs.
func (s *Service) newVerification(r *Run, count int) (*verify.Record, error) {
	if count == 0 {
		count = verify.DefaultCount
	}
	orig, err := s.original(r)
	if err != nil {
		return nil, err
	}
	agents, err := verify.Pick(s.verifyCandidates(r.req.Queue), orig.Agent, orig.Fingerprint, count)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNotVerifiable, err)
	}
	v := &verify.Record{RunID: r.ID, Queue: r.req.Queue, StartedAt: s.cfg.Now(), Original: orig, Want: count, Bound: s.noiseBound(r.req.Queue)}
	for i, agent := range agents {
		req := RunRequest{RunID: verifyRunID(r.ID, i, s.cfg.Now().UnixMilli()), Queue: r.req.Queue, Payload: r.req.Payload,
			Image: r.req.Image, BootstrapQueue: r.req.BootstrapQueue, Branch: r.req.Branch, Commit: r.req.Commit, Agent: agent}
		if _, _, err := s.Submit(req); err != nil {
			return nil, fmt.Errorf("re-run on %s: %w", agent, err)
		}
		v.Reruns = append(v.Reruns, verify.Measurement{RunID: req.RunID, Agent: agent})
	}
	s.logf("run %s: re-measuring on %s", r.ID, strings.Join(agents, ", "))
	return v, nil
}

// verifyRunID names re-run i of run id: within the run id's 200
// characters, printable.
func verifyRunID(id string, i int, ms int64) string {
	return fmt.Sprintf("%.150s.verify%d-%d", id, i, ms)
}

// original is the run's own measurement; an error when it has none to
// compare with.
func (s *Service) original(r *Run) (verify.Measurement, error) {
	r.mu.Lock()
	done, st, payload := r.done, r.status, r.req.Payload
	r.mu.Unlock()
	switch {
	case !done:
		return verify.Measurement{}, fmt.Errorf("%w: run %s has not finished", ErrNotVerifiable, r.ID)
	case st != client.Obtained:
		return verify.Measurement{}, fmt.Errorf("%w: run %s ended %s", ErrNotVerifiable, r.ID, statusNames[st])
	case payload == "":
		return verify.Measurement{}, fmt.Errorf("%w: run %s was found on Buildkite after a restart; its payload is not known here", ErrNotVerifiable, r.ID)
	}
	m := s.measure(r)
	if m.Error != "" || m.Noisy {
		return m, fmt.Errorf("%w: run %s has no clean score: %s", ErrNotVerifiable, r.ID, strings.TrimSpace(m.Error+" noisy="+fmt.Sprint(m.Noisy)))
	}
	return m, nil
}

// measure is a run's measurement now (not done: Done false).
func (s *Service) measure(r *Run) verify.Measurement {
	r.mu.Lock()
	done, k := r.done, r.result
	facts := append([]runfacts.Facts(nil), r.marks.attempts...)
	at := r.marks.finishedAt
	r.mu.Unlock()
	if !done {
		return verify.Measurement{RunID: r.ID, Agent: r.req.Agent}
	}
	res, err := s.keptResult(k)
	if err != nil {
		return verify.Measurement{RunID: r.ID, Agent: r.req.Agent, Error: err.Error(), Done: true}
	}
	return verify.FromPoint(canary.PointFrom(r.ID, res, facts, at))
}

// verifyCandidates is the queue's available agents, idle first, with the
// fingerprint of their last canary.
func (s *Service) verifyCandidates(queue string) []verify.Candidate {
	s.canary.mu.Lock()
	defer s.canary.mu.Unlock()
	var idle, busy []verify.Candidate
	for _, a := range s.roster.List() {
		if a.Queue != queue || a.Lost || a.Paused {
			continue
		}
		c := verify.Candidate{Agent: a.Name}
		if pts := s.canary.points[a.Name]; len(pts) > 0 {
			c.Fingerprint = pts[len(pts)-1].Fingerprint
		}
		if a.Busy {
			busy = append(busy, c)
		} else {
			idle = append(idle, c)
		}
	}
	return append(idle, busy...)
}

// noiseBound is the queue's noise policy's bound (the default policy's
// without a registry).
func (s *Service) noiseBound(queue string) float64 {
	var p noisepolicy.Policy
	if s.cfg.Registry != nil {
		if v, err := s.cfg.Registry.Lookup(queue); err == nil && v.Noise != nil {
			p = *v.Noise
		}
	}
	return verify.Bound(p)
}

// verifyReport judges v now; s.verifs.mu is held. A re-run that is done
// is written into v (and kept) once, so the report stays the same after
// the re-run leaves the service (--keep-done) or the service restarts.
func (s *Service) verifyReport(v *verify.Record) verify.Report {
	changed := false
	rep := v.Report(func(m verify.Measurement) verify.Measurement {
		r := s.runs.get(m.RunID)
		if r == nil && !s.scanned() {
			return m // the startup scan may still adopt it: running
		}
		if r == nil {
			m.Error, m.Done = "the re-run is no longer held by the service (not found on Buildkite after a restart)", true
			return m
		}
		now := s.measure(r)
		if now.Done {
			now.Agent = cmp.Or(now.Agent, m.Agent)
			changed = true
		}
		return now
	})
	if changed {
		copy(v.Reruns, rep.Reruns)
		s.keepVerification(*v)
	}
	return rep
}

// scanned is whether the startup scan has found the service's builds
// (s.ready closed).
func (s *Service) scanned() bool {
	select {
	case <-s.ready:
		return true
	default:
		return false
	}
}

// keepVerification writes v to the store (none: nothing kept). It runs
// under s.verifs.mu, so the writes of one verification keep their order
// (a later state never lost under an earlier one); they are rare: a
// verification's start and each re-run's end.
func (s *Service) keepVerification(v verify.Record) {
	if s.cfg.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.cfg.Store.PutVerification(ctx, v); err != nil {
		s.logf("store: verification of %s not kept: %v", v.RunID, err)
	}
}

// initVerify restores the verifications the store kept (within its
// retention; run by New, before the startup scan adopts their re-runs).
func (s *Service) initVerify() {
	s.verifs = &verifications{byRun: map[string]*verify.Record{}}
	if s.cfg.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, err := s.cfg.Store.Verifications(ctx, time.Time{})
	if err != nil {
		s.logf("store: verifications not restored: %v", err)
		return
	}
	for i := range recs {
		s.verifs.byRun[recs[i].RunID] = &recs[i]
	}
}

// verifyDone measures a finished re-run into its verification, so that
// it is kept even if no client asks until after a restart; r.mu is held
// (Run.finish), so the work is done outside.
func (s *Service) verifyDone(r *Run) {
	if !strings.Contains(r.ID, ".verify") {
		return
	}
	go func() {
		s.verifs.mu.Lock()
		defer s.verifs.mu.Unlock()
		for _, v := range s.verifs.byRun {
			if slices.ContainsFunc(v.Reruns, func(m verify.Measurement) bool { return m.RunID == r.ID && !m.Done }) {
				s.verifyReport(v)
				return
			}
		}
	}()
}

// VerifyReport is run id's verification as it stands; false when none
// was started.
func (s *Service) VerifyReport(id string) (verify.Report, bool) {
	s.verifs.mu.Lock()
	defer s.verifs.mu.Unlock()
	v := s.verifs.byRun[id]
	if v == nil {
		return verify.Report{}, false
	}
	return s.verifyReport(v), true
}

func (s *Service) servePostVerify(w http.ResponseWriter, r *http.Request) {
	var req VerifyRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "body is not a verify request: "+err.Error())
		return
	}
	rep, err := s.Verify(r.PathValue("id"), req.Count)
	switch {
	case errors.Is(err, ErrNotVerifiable):
		writeError(w, http.StatusConflict, err.Error())
	case err != nil:
		writeError(w, http.StatusUnprocessableEntity, err.Error())
	default:
		writeJSON(w, http.StatusAccepted, rep)
	}
}

func (s *Service) serveGetVerify(w http.ResponseWriter, r *http.Request) {
	rep, ok := s.VerifyReport(r.PathValue("id"))
	if !ok {
		writeError(w, http.StatusNotFound, "no verification of run "+r.PathValue("id"))
		return
	}
	writeJSON(w, http.StatusOK, rep)
}
