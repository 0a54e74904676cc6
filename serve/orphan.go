package serve

import (
	"time"
)

// DefaultOrphanGrace is how long a run whose client went away waits for
// one to re-attach before its build is canceled. A client riding out a
// restart of the service re-attaches within a second or two; a Kernelbot
// backend that restarted never does (it fails the submissions a restart
// interrupted), and its builds would hold GPUs with nobody to read them.
const DefaultOrphanGrace = 2 * time.Minute

// attach counts an open event stream of the run; the returned func, called
// when the stream ends, records the time the run was left alone.
func (r *Run) attach(now func() time.Time) (detach func()) {
	r.mu.Lock()
	r.streams++
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.streams--
		if r.streams == 0 {
			r.detachedAt = now()
		}
	}
}

// orphanedFor is how long the run has had no client: zero while a stream
// is open or when none ever was (a client that only polls GET is never
// taken for gone).
func (r *Run) orphanedFor(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.canceled != "" || r.streams > 0 || r.detachedAt.IsZero() {
		return 0
	}
	return now.Sub(r.detachedAt)
}

// checkOrphans cancels the runs, created or still queued for their
// create, whose client has been gone longer than the grace period.
func (s *Service) checkOrphans() {
	grace := s.cfg.OrphanGrace
	if grace < 0 {
		return
	}
	now := s.cfg.Now()
	for _, r := range append(s.runs.active(), s.pending.list()...) {
		if d := r.orphanedFor(now); d > grace {
			go s.Cancel(r, "its client went away "+d.Round(time.Second).String()+" ago and none re-attached")
		}
	}
}
