package client

import (
	"context"
	"fmt"
	"time"

	buildkite "github.com/buildkite/go-buildkite/v4"
)

// ListFilter selects builds of the pipeline server-side, so that one
// request answers for many builds (kbgen serve's watcher).
type ListFilter struct {
	States       []string
	MetaData     map[string]string
	CreatedFrom  time.Time
	FinishedFrom time.Time
	// ExcludeJobs leaves the jobs out of the answer: a build's state and
	// meta-data are all a watcher needs.
	ExcludeJobs bool
	// IncludeRetriedJobs lists every job of a step, retried ones too;
	// without it Buildkite lists only each step's latest job
	// (pages/apis/rest_api/builds.md, include_retried_jobs).
	IncludeRetriedJobs bool
	// MaxPages bounds the requests (100 builds each); default 1.
	MaxPages int
}

// FilterBuilds lists the builds matching f, newest first. more is true
// when MaxPages ran out before the last page.
func (c *Client) FilterBuilds(ctx context.Context, f ListFilter) (out []Build, more bool, err error) {
	opt := &buildkite.BuildsListOptions{
		State:              f.States,
		MetaData:           buildkite.MetaDataFilters{MetaData: f.MetaData},
		CreatedFrom:        f.CreatedFrom,
		FinishedFrom:       f.FinishedFrom,
		ExcludeJobs:        f.ExcludeJobs,
		IncludeRetriedJobs: f.IncludeRetriedJobs,
		// The expanded pipeline is never needed (builds.md); nothing
		// leaves out env, which carries the payload.
		ExcludePipeline: true,
		ListOptions:     buildkite.ListOptions{PerPage: 100, Page: 1},
	}
	pages := max(f.MaxPages, 1)
	for p := 0; p < pages; p++ {
		bs, resp, err := c.bk.Builds.ListByPipeline(ctx, c.opts.Org, c.opts.Pipeline, opt)
		if err != nil {
			return nil, false, fmt.Errorf("listing builds: %w", c.scrub(err))
		}
		for i := range bs {
			out = append(out, *convertBuild(&bs[i]))
		}
		if resp == nil || resp.NextPage == 0 || len(bs) == 0 {
			return out, false, nil
		}
		opt.Page = resp.NextPage
	}
	return out, true, nil
}
