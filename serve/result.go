package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/payload"
)

// resolve ends a run whose build finished. The result usually rides on the
// build (meta-data kbgen_result, set by the runner): no request at all.
// Otherwise a fetcher reads the result.json artifact.
func (s *Service) resolve(r *Run, b *client.Build) {
	if v := b.MetaData[payload.ResultMetaDataKey]; v != "" {
		if data, err := payload.DecodeResultMetaData(v); err == nil {
			if res, err := client.ParseResult(data); err == nil {
				s.complete(r, res)
				return
			}
		}
		s.logf("run %s: build %d carries an unreadable result meta-data; reading the artifact", r.ID, b.Number)
	}
	r.mu.Lock()
	busy := r.fetching || r.done
	r.fetching = true
	r.mu.Unlock()
	if !busy {
		s.fetchq <- r
	}
}

func (s *Service) complete(r *Run, res *payload.FullResult) {
	st := client.Obtained
	if !res.Success {
		st = client.RunnerFailed
	}
	if r.finish(st, res, s.cfg.Now()) {
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
	var err error
	for attempt := 1; attempt <= fetchAttempts; attempt++ {
		var res *payload.FullResult
		if res, err = s.fetchOnce(WithClass(ctx, Urgent), number); err == nil {
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
	r.finish(client.Infra, payload.Failed(payload.SystemInfo{}, fmt.Errorf("build %d finished, but its result could not be fetched: %v; `kbgen result %d` tries again", number, err, number)), s.cfg.Now())
}

// fetchOnce finds result.json among the build's artifacts (one request)
// and downloads it (one request, then storage without the token). When
// there is none, the build with its jobs says why.
func (s *Service) fetchOnce(ctx context.Context, number int) (*payload.FullResult, error) {
	c := s.cfg.Client
	as, err := c.ListArtifacts(ctx, number, "")
	if err != nil {
		return nil, err
	}
	if art := client.FindResult(as); art != nil {
		data, err := c.Download(ctx, art, client.MaxResultBytes)
		if err != nil {
			return nil, err
		}
		if res, perr := client.ParseResult(data); perr == nil {
			return res, nil
		}
	}
	b, err := c.GetBuild(ctx, number)
	if err != nil {
		return nil, err
	}
	return c.Result(ctx, b)
}
