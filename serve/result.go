package serve

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/payload"
)

// resolve ends a run whose build finished. A canceled build's run is
// timed_out whatever the build carries (canceledResult). The result usually rides on the
// build (meta-data kbgen_result, set by the runner): no request at all,
// when it is the latest eval job's. Otherwise, and for a profile run, whose
// download_url only the job's artifact list knows (client.LinkProfiles), a
// fetcher reads it as kbgen submit does (client.Result), so the two always
// agree.
func (s *Service) resolve(r *Run, b *client.Build) {
	s.noteFinished(r, b)
	if b.State == client.StateCanceled {
		_, _, _, deadline, _, _ := r.snapshot()
		if r.finish(client.TimedOut, canceledResult(b.Number, deadline), s.keep, s.cfg.Now()) {
			s.logf("run %s: build %d canceled", r.ID, b.Number)
		}
		return
	}
	if res := s.fromMetaData(r, b); res != nil && !client.HasProfile(res) {
		s.complete(r, res)
		return
	}
	r.mu.Lock()
	busy := r.fetching || r.done
	r.fetching = true
	r.final = b
	r.mu.Unlock()
	if !busy {
		s.fetchq <- r
	}
}

// fromMetaData is the build's result meta-data when it is the latest eval
// job's (client.MetaDataResult, the rule kbgen submit follows too); else
// nil, logged unless the build carries none.
func (s *Service) fromMetaData(r *Run, b *client.Build) *payload.FullResult {
	res, err := client.MetaDataResult(b)
	if err != nil {
		if !errors.Is(err, client.ErrNoResultMetaData) {
			s.logf("run %s: %v; reading the artifact", r.ID, err)
		}
		return nil
	}
	return res
}

func (s *Service) complete(r *Run, res *payload.FullResult) {
	st := client.Obtained
	if !res.Success {
		st = client.RunnerFailed
	}
	if r.finish(st, res, s.keep, s.cfg.Now()) {
		s.logf("run %s: %s", r.ID, statusNames[st])
	}
}

// fetcher reads results from artifacts, a few at a time.
func (s *Service) fetcher(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-s.fetchq:
			s.fetch(ctx, r)
		}
	}
}

// fetchAttempts bounds the tries of one result fetch before the run ends
// as infra (exit 4).
const fetchAttempts = 4

func (s *Service) fetch(ctx context.Context, r *Run) {
	number, _, _, _, _, _ := r.snapshot()
	r.mu.Lock()
	b := r.final
	r.mu.Unlock()
	var err error
	for attempt := 1; attempt <= fetchAttempts; attempt++ {
		var res *payload.FullResult
		if res, err = s.fetchOnce(WithClass(ctx, Urgent), number, b); err == nil {
			s.complete(r, res)
			return
		}
		if ctx.Err() != nil {
			return
		}
		s.logf("run %s: fetching the result of build %d: %v", r.ID, number, err)
		if !sleepCtx(ctx, time.Duration(attempt)*2*time.Second) {
			return
		}
	}
	r.finish(client.Infra, payload.Failed(payload.SystemInfo{}, fmt.Errorf("build %d finished, but its result could not be fetched: %v; `kbgen result %d` tries again", number, err, number)), s.keep, s.cfg.Now())
}

// fetchOnce reads the result as kbgen submit does (client.Result: the
// latest eval job's result.json artifact, or why there is none), from the
// finished build as the watcher saw it with its jobs (else one request
// gets it), so the service and submit always agree.
func (s *Service) fetchOnce(ctx context.Context, number int, b *client.Build) (*payload.FullResult, error) {
	c := s.cfg.Client
	if b == nil || len(b.Jobs) == 0 || !b.Finished() {
		var err error
		if b, err = c.GetBuild(ctx, number); err != nil {
			return nil, err
		}
	}
	return c.Result(ctx, b)
}
