package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// Schedule is how often the poller asks for the build's state, as a
// function of how long it has waited.
type Schedule func(elapsed time.Duration) time.Duration

// DefaultSchedule polls after 1 s and 2 s (a compile error or a bad
// payload ends a build that fast), every 1.5 s until 6 s, then every 1.8 s
// until 90 s, and backs off to 3 s and then 5 s for long builds.
//
// Under 90 s the interval is set by two budgets at once: the result is
// printed on average half an interval after the build passes, so 1.8 s
// keeps the median delay under one second, and a 60-second build still
// costs under 40 API requests (create, about 35 polls, artifact list,
// download). Past 90 s the job is a long benchmark and requests matter more
// than a second.
func DefaultSchedule(elapsed time.Duration) time.Duration {
	switch {
	case elapsed < 2*time.Second:
		return time.Second
	case elapsed < 6*time.Second:
		return 1500 * time.Millisecond
	case elapsed < 90*time.Second:
		return 1800 * time.Millisecond
	case elapsed < 150*time.Second:
		return 3 * time.Second
	}
	return 5 * time.Second
}

// Event is one progress report of a wait.
type Event struct {
	Kind    string        `json:"event"` // created, state, job, canceled, done
	Build   int           `json:"build"`
	URL     string        `json:"url,omitempty"`
	RunID   string        `json:"run_id,omitempty"`
	Step    string        `json:"step,omitempty"`
	State   string        `json:"state,omitempty"`
	Elapsed time.Duration `json:"-"`
	Seconds float64       `json:"elapsed"`
	Success *bool         `json:"success,omitempty"`
	Exit    *int          `json:"exit_code,omitempty"`
	Error   string        `json:"error,omitempty"`
}

// WaitOptions control Wait.
type WaitOptions struct {
	Schedule Schedule // default DefaultSchedule
	// Start is when the wait (or the submission) began, for elapsed times;
	// zero means now.
	Start time.Time
	// Deadline, when set, ends the wait with ErrTimeout. It is measured on
	// the client's clock.
	Deadline time.Time
	// OnEvent receives state changes of the build and of its eval job.
	OnEvent func(Event)
	// OutageTolerance is how long polls may keep failing (5xx, 429,
	// dropped connections, each already retried) before Wait gives up;
	// default DefaultOutageTolerance. 4xx answers end the wait at once.
	OutageTolerance time.Duration
	// Initial is the build as just created: it counts as the first poll,
	// so the first request waits one interval.
	Initial *Build
}

// DefaultOutageTolerance rides out a short Buildkite API outage.
const DefaultOutageTolerance = 2 * time.Minute

// transient reports whether a failed request may succeed if repeated later.
func transient(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) || ae.Permanent {
		return false
	}
	return ae.Status == 0 || ae.Status >= 500 || ae.Status == 429
}

// ErrTimeout is returned by Wait when the deadline passed first.
var ErrTimeout = errors.New("timed out")

// Wait polls build number until it finishes and returns it. On timeout or
// a canceled ctx it returns the last build it saw (nil if none) with
// ErrTimeout or ctx's error.
func (c *Client) Wait(ctx context.Context, number int, opts WaitOptions) (*Build, error) {
	clock := c.opts.Clock
	if opts.Schedule == nil {
		opts.Schedule = DefaultSchedule
	}
	if opts.Start.IsZero() {
		opts.Start = clock.Now()
	}
	emit := func(e Event) {
		if opts.OnEvent != nil {
			e.Build = number
			e.Seconds = e.Elapsed.Round(100 * time.Millisecond).Seconds()
			opts.OnEvent(e)
		}
	}
	if opts.OutageTolerance == 0 {
		opts.OutageTolerance = DefaultOutageTolerance
	}
	var last *Build
	lastOK := clock.Now()
	lastState, lastJob := "", ""
	for {
		var b *Build
		if opts.Initial != nil {
			b, opts.Initial = opts.Initial, nil
		} else {
			var err error
			if b, err = c.GetBuild(ctx, number); err != nil {
				if ctx.Err() != nil {
					return last, ctx.Err()
				}
				down := clock.Now().Sub(lastOK)
				if !transient(err) || down >= opts.OutageTolerance {
					return last, err
				}
				// The build runs on whether or not we can see it: keep
				// asking rather than make the caller re-attach.
				c.api.logf("api poll failed (%v); still trying, %s of outage so far", err, down.Round(time.Second))
				wait := opts.Schedule(clock.Now().Sub(opts.Start))
				if !opts.Deadline.IsZero() && !clock.Now().Before(opts.Deadline) {
					return last, fmt.Errorf("%w after %s", ErrTimeout, clock.Now().Sub(opts.Start).Round(100*time.Millisecond))
				}
				if err := clock.Sleep(ctx, wait); err != nil {
					return last, err
				}
				continue
			}
		}
		lastOK = clock.Now()
		last = b
		elapsed := clock.Now().Sub(opts.Start)
		if b.State != lastState {
			lastState = b.State
			emit(Event{Kind: "state", State: b.State, Elapsed: elapsed})
		}
		if j := b.EvalJob(); j != nil && j.State != lastJob {
			lastJob = j.State
			emit(Event{Kind: "job", Step: contract.EvalStepKey, State: j.State, Elapsed: elapsed})
		}
		if b.Finished() {
			return b, nil
		}
		wait := opts.Schedule(elapsed)
		if !opts.Deadline.IsZero() {
			left := opts.Deadline.Sub(clock.Now())
			if left <= 0 {
				return b, fmt.Errorf("%w after %s", ErrTimeout, elapsed.Round(100*time.Millisecond))
			}
			wait = min(wait, left)
		}
		if err := clock.Sleep(ctx, wait); err != nil {
			return b, err
		}
	}
}
