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
// 5), as for an interrupted kbgen submit. Canceling a done run does
// nothing.
func (s *Service) Cancel(r *Run, why string) {
	r.mu.Lock()
	if r.done || r.canceled != "" {
		r.mu.Unlock()
		return
	}
	r.canceled = why
	build := r.build
	r.mu.Unlock()
	if build == 0 {
		// The creator skips it; a create already in flight cancels the
		// build it makes.
		r.finish(client.TimedOut, payload.Failed(payload.SystemInfo{}, fmt.Errorf("%s before its build was created; nothing ran", why)), s.keep, s.cfg.Now())
		return
	}
	s.cancelBuild(r, why)
}

func (s *Service) cancelBuild(r *Run, why string) {
	build, state, _, _, _, _ := r.snapshot()
	ctx, done := context.WithTimeout(WithClass(s.ctx, Urgent), 30*time.Second)
	defer done()
	msg := fmt.Sprintf("%s waiting for build %d (state %s)", why, build, state)
	if err := s.cfg.Client.CancelBuild(ctx, build); err != nil {
		msg += "; canceling it failed: " + err.Error()
	} else {
		msg += "; the build was canceled"
		r.emit(client.Event{Kind: "canceled", State: state}, s.cfg.Now())
	}
	s.logf("run %s: %s", r.ID, msg)
	r.finish(client.TimedOut, payload.Failed(payload.SystemInfo{}, fmt.Errorf("%s", msg)), s.keep, s.cfg.Now())
}
