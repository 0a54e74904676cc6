package serve

import (
	"context"
	"time"

	"github.com/gpu-mode/kbgen/client"
)

// poller is the watcher's memory between polls.
type poller struct {
	cursor time.Time // finished_from of the next poll, Buildkite's clock
	polls  int
	last   time.Time
	pruned time.Time
}

// cursorOverlap re-reads builds that finished just before the cursor: the
// list may index a build a moment after its finished_at.
const cursorOverlap = 5 * time.Second

// minKickGap spaces polls made for webhooks, so a burst of them (a
// build.finished and a job.finished for each of 40 builds) is a handful of
// requests, not 80.
const minKickGap = 200 * time.Millisecond

// progressEvery: every this many polls, one more request lists the running
// builds with their jobs (at most 100, the newest), for the scheduled →
// running and eval job progress events.
const progressEvery = 10

// watch is the one watcher of every run: it polls while builds are in
// flight, at once when woken by a webhook or a create, and never while
// none is.
func (s *Service) watch(ctx context.Context) {
	t := time.NewTimer(s.cfg.PollEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.kick:
			if gap := s.cfg.Now().Sub(s.poller.last); gap < minKickGap {
				if !sleepCtx(ctx, minKickGap-gap) {
					return
				}
			}
		}
		s.pollOnce(ctx)
		s.checkDeadlines()
		s.checkOrphans()
		if now := s.cfg.Now(); now.Sub(s.poller.pruned) > time.Minute {
			s.poller.pruned = now
			if n := s.runs.prune(now.Add(-s.cfg.KeepDone), s.keep); n > 0 {
				s.logf("forgot %d runs done more than %s ago", n, s.cfg.KeepDone)
			}
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(s.interval())
	}
}

// interval is the time to the next poll: PollEvery, or while creates
// queue for the budget, the pace that keeps polls within their share
// (PollShare a Window), so creates get all of theirs and the budget is
// used whole, and detection slows no more than that needs.
func (s *Service) interval() time.Duration {
	if len(s.pending.list()) > 0 {
		if share := s.cfg.Budget.PollShare; share > 0 {
			return max(s.cfg.PollEvery, Window/time.Duration(share))
		}
		return 2 * s.cfg.PollEvery
	}
	return s.cfg.PollEvery
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// pollOnce asks Buildkite, in one request whatever the number of runs,
// which of the service's builds finished since the cursor; every
// progressEvery polls a second request lists the running ones.
func (s *Service) pollOnce(ctx context.Context) {
	active := s.runs.active()
	if len(active) == 0 {
		return
	}
	p := &s.poller
	p.last = s.cfg.Now()
	oldest := time.Time{}
	for _, r := range active {
		_, _, created, _, _, _ := r.snapshot()
		if oldest.IsZero() || (!created.IsZero() && created.Before(oldest)) {
			oldest = created
		}
	}
	if p.cursor.IsZero() {
		if oldest.IsZero() {
			oldest = p.last.Add(-time.Minute)
		}
		p.cursor = oldest.Add(-time.Second)
	}
	if s.cfg.Budget.Ready(Poll) > 0 {
		for _, r := range active {
			s.sayBudget(r)
		}
	}
	pctx := WithClass(ctx, Poll)
	meta := map[string]string{MetaDataService: s.cfg.Name}
	// With jobs: the result meta-data counts only when stamped with the
	// latest eval job (resolve).
	done, _, err := s.cfg.Client.FilterBuilds(pctx, client.ListFilter{MetaData: meta, FinishedFrom: p.cursor, MaxPages: 10})
	if err != nil {
		s.logf("poll: %v (next poll in %s)", err, s.cfg.PollEvery)
		return
	}
	p.polls++
	latest := p.cursor
	for i := range done {
		b := &done[i]
		if b.FinishedAt.After(latest) {
			latest = b.FinishedAt
		}
		s.seen(b)
	}
	if c := latest.Add(-cursorOverlap); c.After(p.cursor) {
		p.cursor = c
	}
	if p.polls%progressEvery == 1 && !oldest.IsZero() {
		// With jobs: the eval job's state is the "job" progress event.
		running, _, err := s.cfg.Client.FilterBuilds(pctx, client.ListFilter{States: []string{client.StateRunning}, MetaData: meta, CreatedFrom: oldest.Add(-time.Second)})
		if err != nil {
			s.logf("poll: %v", err)
			return
		}
		for i := range running {
			s.seen(&running[i])
		}
	}
}

// seen takes in a build the API reported: a state change for its run, and
// once finished, its result.
func (s *Service) seen(b *client.Build) {
	r := s.runs.byNumber(b.Number)
	if r == nil {
		return // not ours now (another service, or a run older than the scan)
	}
	now := s.cfg.Now()
	r.observe(b, now)
	if b.Finished() {
		s.resolve(r, b)
	}
}

// checkDeadlines cancels the builds of runs whose timeout ran out.
func (s *Service) checkDeadlines() {
	now := s.cfg.Now()
	for _, r := range s.runs.active() {
		_, _, _, dl, why, done := r.snapshot()
		if !done && why == "" && !dl.IsZero() && !now.Before(dl) {
			go s.Cancel(r, "timed out after "+dl.Sub(r.start).Round(100*time.Millisecond).String())
		}
	}
	for _, r := range s.pending.list() {
		_, _, _, dl, why, done := r.snapshot()
		if !done && why == "" && !dl.IsZero() && !now.Before(dl) {
			go s.Cancel(r, "timed out after "+dl.Sub(r.start).Round(100*time.Millisecond).String()+" waiting for API budget")
		}
	}
}
