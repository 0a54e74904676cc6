package serve

import (
	"context"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
)

// recoverPages bounds the startup scan: 100 builds a page.
const recoverPages = 100

// recover finds the service's builds on Buildkite before any request is
// served, so a restarted service knows every run id it created: a client
// that re-submits one attaches to its build, never creates a second. Builds
// still in flight are found at any age; finished ones within
// RecoverWindow, and their results are read as the watcher's would be.
func (s *Service) recover(ctx context.Context) error {
	ctx = WithClass(ctx, Urgent)
	meta := map[string]string{MetaDataService: s.cfg.Name}
	inflight, more, err := s.cfg.Client.FilterBuilds(ctx, client.ListFilter{
		States:   []string{client.StateCreating, client.StateScheduled, client.StateRunning, client.StateFailing, client.StateCanceling},
		MetaData: meta, ExcludeJobs: true, MaxPages: recoverPages,
	})
	if err != nil {
		return err
	}
	if more {
		s.logf("startup: more than %d builds in flight; the oldest are not resumed", recoverPages*100)
	}
	finished, _, err := s.cfg.Client.FilterBuilds(ctx, client.ListFilter{
		MetaData: meta, FinishedFrom: s.cfg.Now().Add(-s.cfg.RecoverWindow), MaxPages: recoverPages,
		IncludeRetriedJobs: true, // with every attempt's job, for resolve (vouchFacts)
	})
	if err != nil {
		return err
	}
	n := 0
	for _, bs := range [][]client.Build{inflight, finished} {
		for i := range bs {
			if s.adopt(&bs[i]) {
				n++
			}
		}
	}
	if n > 0 {
		s.logf("startup: resumed %d runs (%d in flight)", n, len(inflight))
	}
	// The orphan grace of a resumed run starts when the service can
	// answer its client, not when a long scan found it.
	now := s.cfg.Now()
	for _, r := range s.runs.active() {
		r.touch(now)
	}
	return nil
}

// adopt turns a build found on Buildkite into a run. A run of that id
// submitted while Buildkite was unreachable at start, and still waiting
// for its create, gets this build instead.
func (s *Service) adopt(b *client.Build) bool {
	id := b.MetaData[contract.MetaDataRunID]
	if id == "" || s.runs.byNumber(b.Number) != nil {
		return false
	}
	if old := s.runs.get(id); old != nil {
		if build, _, _, _, _, done := old.snapshot(); build != 0 || done {
			return false
		}
		old.setBuild(b, s.cfg.Now())
		s.runs.linkBuild(old, b.Number)
		if b.Finished() {
			s.resolve(old, b)
		}
		return true
	}
	start := b.CreatedAt
	if start.IsZero() {
		start = s.cfg.Now()
	}
	r := newRun(RunRequest{RunID: id, Queue: b.Queue(), Detach: b.MetaData[MetaDataDetach] == "true"}, start)
	r.creator = b.MetaData[MetaDataInstance]
	if dl, err := time.Parse(time.RFC3339, b.MetaData[MetaDataDeadline]); err == nil {
		r.deadline = dl
	}
	if got := s.runs.adopt(r); got != r {
		return false
	}
	r.setBuild(b, s.cfg.Now())
	s.runs.linkBuild(r, b.Number)
	if b.Finished() {
		s.resolve(r, b)
	} else {
		// Its client's stream died with the old service: it has the grace
		// period to re-attach (orphan.go).
		r.seen = s.cfg.Now()
	}
	return true
}
