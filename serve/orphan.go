package serve

import (
	"time"
)

// DefaultOrphanGrace is how long a run may go without a client before its
// build is canceled: a client riding out a restart of the service
// re-attaches within a second or two, and one that submits opens its
// stream (or polls) at once; a Kernelbot backend that restarted never
// comes back (it fails the submissions a restart interrupted), and its
// builds would hold GPUs with nobody to read them.
const DefaultOrphanGrace = 60 * time.Second

// attach counts an open event stream of the run; the returned func, called
// when the stream ends, records the time the run was last seen.
func (r *Run) attach(now func() time.Time) (detach func()) {
	r.mu.Lock()
	r.streams++
	r.seen = now()
	r.mu.Unlock()
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.streams--
		r.seen = now()
	}
}

// touch records a client's request for the run (POST again, GET): a
// client that polls is there.
func (r *Run) touch(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = now
}

// orphanedFor is how long the run has had no client: zero while a stream
// is open, for a detached run (RunRequest.Detach: its client comes back
// for the result on its own), and once it is done or canceled; else the
// time since its submission, its last GET or its last stream.
func (r *Run) orphanedFor(now time.Time) time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done || r.canceled != "" || r.streams > 0 || r.req.Detach || r.seen.IsZero() {
		return 0
	}
	return now.Sub(r.seen)
}

func (r *Run) createdBy() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.creator
}

// checkOrphans cancels the runs, created or still queued for their
// create, whose client has been gone longer than the grace period.
func (s *Service) checkOrphans() {
	grace := s.cfg.OrphanGrace
	if grace < 0 {
		return
	}
	now := s.cfg.Now()
	twin := s.twinInstance()
	for _, r := range append(s.runs.active(), s.pending.list()...) {
		if twin != "" && r.createdBy() == twin {
			continue // adopted from a live twin, whose client follows it there
		}
		if d := r.orphanedFor(now); d > grace {
			go s.Cancel(r, "no client attached for "+d.Round(time.Second).String())
		}
	}
}
