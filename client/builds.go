package client

import (
	"context"
	"fmt"
	"maps"
	"strconv"
	"time"

	buildkite "github.com/buildkite/go-buildkite/v4"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// Build states Buildkite reports.
const (
	StateCreating  = "creating"
	StateScheduled = "scheduled"
	StateRunning   = "running"
	StatePassed    = "passed"
	StateFailed    = "failed"
	StateFailing   = "failing"
	StateBlocked   = "blocked"
	StateCanceling = "canceling"
	StateCanceled  = "canceled"
	StateSkipped   = "skipped"
	StateNotRun    = "not_run"
)

// Build is what kbgen needs of a Buildkite build.
type Build struct {
	Number     int
	State      string
	WebURL     string
	Message    string
	MetaData   map[string]string
	Env        map[string]string
	CreatedAt  time.Time
	StartedAt  time.Time
	FinishedAt time.Time
	// Blocked: the build waits on a block step. The REST API says so in
	// this flag, not in state, which keeps its last value, e.g. passed
	// (pages/apis/rest_api/builds.md).
	Blocked bool
	Jobs    []Job
}

// Finished reports whether the build will not change state again. A
// blocked build waits on a person, which a Kernelbot run never has: it is
// as good as finished.
func (b *Build) Finished() bool { return FinishedState(b.State) || b.Blocked }

// FinishedState reports whether a build state is final. "blocked" is a
// state of notifications and of the builds-list filter, not of a build's
// REST answer (see Build.Blocked); it is kept for the filter.
func FinishedState(s string) bool {
	switch s {
	case StatePassed, StateFailed, StateBlocked, StateCanceled, StateSkipped, StateNotRun:
		return true
	}
	return false
}

// Queue is the Kernelbot queue the build was submitted to.
func (b *Build) Queue() string {
	if q := b.MetaData[contract.MetaDataQueue]; q != "" {
		return q
	}
	return b.Env[contract.EnvQueue]
}

// EvalJob returns the build's latest eval job (a retried job is replaced by
// its retry), or nil before the pipeline upload added it.
func (b *Build) EvalJob() *Job {
	var found *Job
	for i := range b.Jobs {
		j := &b.Jobs[i]
		if j.StepKey == contract.EvalStepKey && j.Type == "script" {
			if found == nil || !j.Retried {
				found = j
			}
		}
	}
	return found
}

// Job is one job of a build.
type Job struct {
	ID         string
	Type       string // script, waiter, manual, trigger
	StepKey    string
	Label      string
	State      string
	ExitStatus *int
	Retried    bool
	StartedAt  time.Time
	FinishedAt time.Time
	Agent      string
	// RunnableAt is when the job became ready for an agent (its wait
	// for one ends at StartedAt).
	RunnableAt time.Time
}

// Started reports whether an agent ever ran the job.
func (j *Job) Started() bool { return !j.StartedAt.IsZero() }

// NewBuild is a build to create.
type NewBuild struct {
	Branch   string
	Commit   string
	Message  string
	Env      map[string]string
	MetaData map[string]string
	// RunID is looked up in meta-data `run_id` when a create request fails
	// in a way that leaves unclear whether Buildkite made the build.
	RunID string
}

// CreateBuild creates the build. A POST is never blindly repeated (that
// could run a submission twice): after a failure that may have reached
// Buildkite, the client first looks for a build carrying the same run id.
func (c *Client) CreateBuild(ctx context.Context, nb NewBuild) (*Build, error) {
	req := buildkite.CreateBuild{
		Commit:   nb.Commit,
		Branch:   nb.Branch,
		Message:  nb.Message,
		Env:      nb.Env,
		MetaData: nb.MetaData,
	}
	var lastErr error
	for attempt := 1; attempt <= c.opts.Retry.Attempts; attempt++ {
		if attempt > 1 {
			if nb.RunID != "" {
				if b, err := c.FindBuild(ctx, nb.RunID); err == nil && b != nil {
					return b, nil
				}
			}
			if err := sleepBounded(ctx, c.opts.Clock, c.api.backoff(attempt-1)); err != nil {
				break
			}
		}
		b, _, err := c.bk.Builds.Create(ctx, c.opts.Org, c.opts.Pipeline, req)
		if err == nil {
			return convertBuild(&b), nil
		}
		lastErr = c.scrub(err)
		if status := statusOf(err); status != 0 && status < 500 {
			break // a 4xx is our request's fault: repeating it cannot help
		}
		if attempt < c.opts.Retry.Attempts {
			c.api.logf("api create failed (%v); retry %d/%d after looking up run %s", lastErr, attempt, c.opts.Retry.Attempts-1, nb.RunID)
		}
	}
	return nil, fmt.Errorf("creating build: %w", lastErr)
}

// FindBuild returns the pipeline's build whose meta-data run_id is runID,
// or nil when there is none.
func (c *Client) FindBuild(ctx context.Context, runID string) (*Build, error) {
	bs, _, err := c.bk.Builds.ListByPipeline(ctx, c.opts.Org, c.opts.Pipeline, &buildkite.BuildsListOptions{
		MetaData:        buildkite.MetaDataFilters{MetaData: map[string]string{contract.MetaDataRunID: runID}},
		ExcludePipeline: true,
		ListOptions:     buildkite.ListOptions{PerPage: 2},
	})
	if err != nil {
		return nil, fmt.Errorf("looking up run %s: %w", runID, c.scrub(err))
	}
	for i := range bs {
		if bs[i].MetaData[contract.MetaDataRunID] == runID {
			return convertBuild(&bs[i]), nil
		}
	}
	return nil, nil
}

// GetBuild fetches a build with its jobs (each step's latest).
func (c *Client) GetBuild(ctx context.Context, number int) (*Build, error) {
	return c.getBuild(ctx, number, nil)
}

// GetBuildWithRetries fetches a build with every job of each step, the
// retried ones too (include_retried_jobs, pages/apis/rest_api/builds.md):
// what each attempt's run facts are vouched for against, as the lists
// the watcher reads finished builds from are.
func (c *Client) GetBuildWithRetries(ctx context.Context, number int) (*Build, error) {
	return c.getBuild(ctx, number, &buildkite.BuildGetOptions{BuildsListOptions: buildkite.BuildsListOptions{IncludeRetriedJobs: true}})
}

func (c *Client) getBuild(ctx context.Context, number int, opts *buildkite.BuildGetOptions) (*Build, error) {
	b, _, err := c.bk.Builds.Get(ctx, c.opts.Org, c.opts.Pipeline, strconv.Itoa(number), opts)
	if err != nil {
		return nil, fmt.Errorf("getting build %d: %w", number, c.scrub(err))
	}
	return convertBuild(&b), nil
}

// CancelBuild asks Buildkite to cancel the build. Canceling a build that
// already finished is not an error. Buildkite cancels only a scheduled,
// running or failing build and answers 422 otherwise
// (pages/apis/rest_api/builds.md, "Cancel a build"): a 422 is taken as
// done only when the build is then seen finished, never for one that
// goes on.
func (c *Client) CancelBuild(ctx context.Context, number int) error {
	_, err := c.Cancel(ctx, number)
	return err
}

// Cancel is CancelBuild that also returns the build as Buildkite then
// reports it: its cancel answer (canceling, or canceled when no job
// was running), or after a 422 the build seen finished, in whatever
// state it ended (passed: it finished before the cancel came). A build
// that goes on after a 422 is returned with the error (canceling: a
// cancel already on its way).
func (c *Client) Cancel(ctx context.Context, number int) (*Build, error) {
	got, err := c.bk.Builds.Cancel(ctx, c.opts.Org, c.opts.Pipeline, strconv.Itoa(number))
	if err == nil {
		return convertBuild(&got), nil
	}
	serr := c.scrub(err)
	if statusOf(err) == 422 {
		b, gerr := c.GetBuild(ctx, number)
		switch {
		case gerr != nil:
			return nil, fmt.Errorf("canceling build %d: %w; its state is unknown: %v", number, serr, gerr)
		case b.Finished():
			return b, nil
		}
		return b, fmt.Errorf("canceling build %d: %w, and it goes on (state %s)", number, serr, b.State)
	}
	return nil, fmt.Errorf("canceling build %d: %w", number, serr)
}

// ListBuilds lists the pipeline's builds in the given states, up to limit.
func (c *Client) ListBuilds(ctx context.Context, states []string, limit int) ([]Build, error) {
	var out []Build
	opt := &buildkite.BuildsListOptions{State: states, ExcludePipeline: true, ListOptions: buildkite.ListOptions{PerPage: 100, Page: 1}}
	for len(out) < limit {
		bs, resp, err := c.bk.Builds.ListByPipeline(ctx, c.opts.Org, c.opts.Pipeline, opt)
		if err != nil {
			return nil, fmt.Errorf("listing builds: %w", c.scrub(err))
		}
		for i := range bs {
			out = append(out, *convertBuild(&bs[i]))
		}
		if resp == nil || resp.NextPage == 0 || len(bs) == 0 {
			break
		}
		opt.Page = resp.NextPage
	}
	return out, nil
}

func convertBuild(b *buildkite.Build) *Build {
	out := &Build{
		Number:     b.Number,
		State:      b.State,
		WebURL:     b.WebURL,
		Message:    b.Message,
		MetaData:   maps.Clone(b.MetaData),
		CreatedAt:  ts(b.CreatedAt),
		StartedAt:  ts(b.StartedAt),
		FinishedAt: ts(b.FinishedAt),
		Blocked:    b.Blocked,
	}
	if len(b.Env) > 0 {
		out.Env = map[string]string{}
		for k, v := range b.Env {
			if s, ok := v.(string); ok {
				out.Env[k] = s
			}
		}
	}
	for _, j := range b.Jobs {
		out.Jobs = append(out.Jobs, Job{
			ID:         j.ID,
			Type:       j.Type,
			StepKey:    j.StepKey,
			Label:      jobName(j.Name, j.Label),
			State:      j.State,
			ExitStatus: j.ExitStatus,
			Retried:    j.Retried,
			StartedAt:  ts(j.StartedAt),
			FinishedAt: ts(j.FinishedAt),
			Agent:      j.Agent.Name,
			RunnableAt: ts(j.RunnableAt),
		})
	}
	return out
}

// jobName is a REST job's label: the API sends it as "name"
// (pages/apis/rest_api/builds.md, agents.md); "label" is GraphQL's and
// the agent's word, kept as a fallback.
func jobName(name, label string) string {
	if name != "" {
		return name
	}
	return label
}

func ts(t *buildkite.Timestamp) time.Time {
	if t == nil {
		return time.Time{}
	}
	return t.Time
}
