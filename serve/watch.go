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
	// unlisted counts, per build, the progress listings in a row that
	// showed it neither in flight nor finished.
	unlisted map[int]int
}

// watchPages bounds one poll's finished-builds list (100 builds a page):
// far more than finish between two polls; a page beyond it would be
// missed, not a later one (the list is newest first).
const watchPages = 1000

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
		s.retryCancels()
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
		t.Reset(s.untilNext())
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

// untilNext is the time to the next poll, or to the earliest run
// deadline when that comes first: a --timeout is kept to within a poll's
// latency, not an interval's (2 s at one token's budget).
func (s *Service) untilNext() time.Duration {
	d := s.interval()
	now := s.cfg.Now()
	for _, rs := range [][]*Run{s.runs.active(), s.pending.list()} {
		for _, r := range rs {
			if _, _, _, dl, why, done := r.snapshot(); !done && why == "" && !dl.IsZero() {
				d = min(d, max(dl.Sub(now), 10*time.Millisecond))
			}
		}
	}
	return d
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
	// latest eval job (resolve); with the retried ones too: each
	// attempt's facts count only when stamped by its job (vouchFacts).
	done, more, err := s.cfg.Client.FilterBuilds(pctx, client.ListFilter{MetaData: meta, FinishedFrom: p.cursor, MaxPages: watchPages, IncludeRetriedJobs: true})
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
	if c := latest.Add(-cursorOverlap); c.After(p.cursor) && !more {
		p.cursor = c // with pages left unread, the next poll reads them again
	}
	if p.polls%progressEvery == 1 && !oldest.IsZero() {
		s.progress(pctx, meta, oldest, done)
	}
}

// inFlight are the states of a build that is not finished.
var inFlight = []string{client.StateCreating, client.StateScheduled, client.StateRunning, client.StateFailing, client.StateCanceling}

// progress lists the builds in flight with their jobs (one page, the
// newest 100) for the running and eval job progress events. When that is
// all of them, a run whose build is neither there nor in the poll's
// finished list twice in a row (a list index that lags or lost it) is
// looked up on its own.
func (s *Service) progress(ctx context.Context, meta map[string]string, oldest time.Time, finished []client.Build) {
	running, more, err := s.cfg.Client.FilterBuilds(ctx, client.ListFilter{States: inFlight, MetaData: meta, CreatedFrom: oldest.Add(-time.Second)})
	if err != nil {
		s.logf("poll: %v", err)
		return
	}
	listed := map[int]bool{}
	for _, bs := range [][]client.Build{running, finished} {
		for i := range bs {
			listed[bs[i].Number] = true
		}
	}
	for i := range running {
		s.seen(&running[i])
	}
	if more {
		return
	}
	p := &s.poller
	unlisted := map[int]int{}
	for _, r := range s.runs.active() {
		build, _, _, _, _, done := r.snapshot()
		if build == 0 || done || listed[build] {
			continue
		}
		if unlisted[build] = p.unlisted[build] + 1; unlisted[build] < 2 {
			continue
		}
		b, err := s.cfg.Client.GetBuildWithRetries(ctx, build)
		if err != nil {
			s.logf("run %s: build %d is in no list; looking it up: %v", r.ID, build, err)
			continue
		}
		s.logf("run %s: build %d is in no list; looked up on its own: %s", r.ID, build, b.State)
		delete(unlisted, build)
		s.seen(b)
	}
	p.unlisted = unlisted
}

// seen takes in a build the API reported: a state change for its run, and
// once finished, its result.
func (s *Service) seen(b *client.Build) {
	r := s.runs.byNumber(b.Number)
	if r == nil {
		s.noteForeign(b) // not ours: a run older than the scan, or another service's
		return
	}
	now := s.cfg.Now()
	r.observe(b, now)
	s.noteSeen(r, b)
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
