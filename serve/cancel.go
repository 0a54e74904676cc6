package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/payload"
)

// Cancel stops a run: before its create the run just ends; after it the
// build is canceled on Buildkite. Either way the outcome is timed_out (exit
// 5), as for an interrupted kbgen submit; why goes to the log and to the
// run's "canceled" event, not into its outcome, which a restarted service
// must read the same from the build alone (canceledResult). A build that
// finished before the cancel came keeps its own outcome. Canceling a done
// run does nothing.
func (s *Service) Cancel(r *Run, why string) {
	r.mu.Lock()
	if r.done || r.canceled != "" {
		r.mu.Unlock()
		return
	}
	r.canceled = why
	build, state, deadline := r.build, r.buildState, r.deadline
	r.mu.Unlock()
	if state == client.StateCanceling {
		// Already on its way (a restart found it so): another request
		// would be refused (422) until it is canceled.
		r.finish(client.TimedOut, canceledResult(build, deadline), s.keep, s.cfg.Now())
		return
	}
	if build == 0 {
		// The creator skips it; a create already in flight cancels the
		// build it makes.
		r.finish(client.TimedOut, payload.Failed(payload.SystemInfo{}, fmt.Errorf("%s before its build was created; nothing ran", why)), s.keep, s.cfg.Now())
		return
	}
	s.cancelBuild(r, why)
}

// cancelBuild asks Buildkite to cancel the run's build. When it cannot
// (Buildkite unreachable), the run goes on and the watcher asks again at
// its next poll (retryCancels): a run that read timed_out while its build
// ran on would read otherwise after a restart.
func (s *Service) cancelBuild(r *Run, why string) {
	build, _, _, _, _, _ := r.snapshot()
	ctx, done := context.WithTimeout(WithClass(s.ctx, Urgent), 30*time.Second)
	defer done()
	b, err := s.cfg.Client.Cancel(ctx, build)
	now := s.cfg.Now()
	switch {
	case err != nil && b != nil && b.State == client.StateCanceling:
		// Someone's cancel is on its way (Buildkite refuses another): it
		// ends canceled, which reads as this one would.
		s.finishCanceled(r, b, why, now)
	case err != nil:
		s.logf("run %s: %s; canceling build %d failed (trying again at the next poll): %v", r.ID, why, build, err)
		r.mu.Lock()
		r.cancelRetry = true
		r.mu.Unlock()
	case b.Finished() && b.State != client.StateCanceled:
		s.logf("run %s: %s, but build %d had finished (%s): its own outcome stands", r.ID, why, build, b.State)
		s.seen(b)
	default:
		s.finishCanceled(r, b, why, now)
	}
}

// finishCanceled ends a run whose build Buildkite is canceling or has
// canceled: its state and a canceled event saying why, then its outcome
// (unless the watcher, seeing the canceled build, ended it first: then
// it ended the same, and nothing follows its done event).
func (s *Service) finishCanceled(r *Run, b *client.Build, why string, now time.Time) {
	r.mu.Lock()
	done, deadline := r.done, r.deadline
	if !done {
		r.observeLocked(b, now)
		r.emitLocked(client.Event{Kind: "canceled", State: b.State, Error: why}, now)
	}
	r.mu.Unlock()
	s.logf("run %s: %s; build %d canceled (%s)", r.ID, why, b.Number, b.State)
	r.finish(client.TimedOut, canceledResult(b.Number, deadline), s.keep, now)
}

// retryCancels asks again to cancel the builds whose cancel failed.
func (s *Service) retryCancels() {
	for _, r := range s.runs.active() {
		r.mu.Lock()
		retry, why := r.cancelRetry && !r.done, r.canceled
		r.cancelRetry = false
		r.mu.Unlock()
		if retry {
			go s.cancelBuild(r, why)
		}
	}
}

// canceledResult is the outcome of a run whose build was canceled, by this
// service or by hand: made of what Buildkite keeps (the build number, the
// deadline meta-data), so the service says the same before and after any
// number of restarts (issue 27: a timed_out run read runner_failed after
// one). Any result the canceled build carries does not count.
func canceledResult(build int, deadline time.Time) *payload.FullResult {
	msg := fmt.Sprintf("build %d was canceled before its run had a result", build)
	if !deadline.IsZero() {
		msg += fmt.Sprintf(" (its deadline: %s)", deadline.UTC().Format(time.RFC3339))
	}
	msg += "; kbgen serve cancels a run at its deadline, at its client's DELETE, or when no client follows it (its log says which), and an operator may cancel it in Buildkite"
	return payload.Failed(payload.SystemInfo{}, fmt.Errorf("%s", msg))
}
