package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// Status is how a submission or re-attach ended; ExitCode is its exit
// code.
type Status int

const (
	// Obtained: a FullResult with success true.
	Obtained Status = iota
	// RunnerFailed: a FullResult with success false (the runner failed, or
	// the build ended without a usable result.json).
	RunnerFailed
	// Infra: Buildkite or storage could not be reached or refused; the
	// result is unknown.
	Infra
	// TimedOut: the deadline passed, or the wait was interrupted; the build
	// was canceled.
	TimedOut
)

// Outcome is the end of a submission. Result is never nil: when no
// result.json was obtained it is a success:false FullResult whose error
// says why, so a caller can always print it.
type Outcome struct {
	Status Status
	Build  *Build // nil when the build was never created
	Result *payload.FullResult
	// Elapsed is the time from the start of the wait to the outcome.
	Elapsed time.Duration
}

// Submission is one Kernelbot job to run as a build.
type Submission struct {
	Queue    string
	RunID    string
	Encoded  string // the payload, base64(zlib(json))
	Mode     payload.Mode
	Image    string // optional KERNELBOT_IMAGE override
	Priority string // optional KERNELBOT_PRIORITY
	User     string // optional KERNELBOT_USER (fair-share key)
	// BootstrapQueue is the optional KERNELBOT_BOOTSTRAP_QUEUE: where the
	// bootstrap step runs when pipelines are signed (docs/security.md).
	BootstrapQueue string
	Branch         string
	Commit         string
	// Agent optionally pins the eval step to the agent of this name
	// (contract.EnvTargetAgent): canaries and re-measurements.
	Agent string
}

// NewBuild is the build request of the build-env contract
// (docs/formats.md#build-env): the payload in the env (split when large),
// run id and queue in env and meta-data (contract.MetaDataRunID,
// MetaDataQueue), and a message naming the run.
func (s *Submission) NewBuild() NewBuild {
	env := payload.SplitEnv(s.Encoded)
	env[contract.EnvRunID] = s.RunID
	env[contract.EnvQueue] = s.Queue
	for k, v := range map[string]string{contract.EnvImage: s.Image, contract.EnvPriority: s.Priority, contract.EnvUser: s.User, contract.EnvBootstrapQueue: s.BootstrapQueue, contract.EnvTargetAgent: s.Agent} {
		if v != "" {
			env[k] = v
		}
	}
	msg := fmt.Sprintf("kbgen %s on %s", s.RunID, s.Queue)
	if s.Mode != "" {
		msg = fmt.Sprintf("kbgen %s: %s on %s", s.RunID, s.Mode, s.Queue)
	}
	return NewBuild{
		Branch:   s.Branch,
		Commit:   s.Commit,
		Message:  msg,
		Env:      env,
		MetaData: map[string]string{contract.MetaDataRunID: s.RunID, contract.MetaDataQueue: s.Queue},
		RunID:    s.RunID,
	}
}

// Submit creates the build, waits for it and fetches its result. On
// timeout or when ctx is canceled (SIGINT/SIGTERM) it cancels the build.
// w.Deadline bounds every phase: the create and its retries, the wait,
// the result fetch; then at most cleanupTime more goes to canceling.
func (c *Client) Submit(ctx context.Context, s Submission, w WaitOptions) *Outcome {
	if w.Start.IsZero() {
		w.Start = c.opts.Clock.Now()
	}
	bctx, done := c.bound(ctx, w.Deadline)
	defer done()
	nb := s.NewBuild()
	b, err := c.CreateBuild(bctx, nb)
	if err != nil {
		var out *Outcome
		switch {
		case pastDeadline(bctx, c.opts.Clock):
			out = c.createTimedOut(ctx, s, err, w)
		case ctx.Err() != nil:
			out = &Outcome{Status: TimedOut, Result: failed(fmt.Sprintf("interrupted before run %s was submitted", s.RunID))}
		default:
			out = &Outcome{Status: Infra, Result: failed(fmt.Sprintf("run %s on %s: %v", s.RunID, s.Queue, err))}
		}
		out.Elapsed = c.opts.Clock.Now().Sub(w.Start)
		return out
	}
	if w.OnEvent != nil {
		w.OnEvent(Event{Kind: "created", Build: b.Number, URL: b.WebURL, RunID: s.RunID})
	}
	w.Initial = b
	out := c.finish(ctx, bctx, b.Number, w)
	out.Elapsed = c.opts.Clock.Now().Sub(w.Start)
	return out
}

// cleanupTime bounds what a timed-out submission spends after its
// deadline: finding and canceling its build.
const cleanupTime = 5 * time.Second

// createTimedOut ends a submission whose deadline passed before its
// create succeeded. A create that reached Buildkite may have made the
// build all the same: it is looked up by run id and canceled.
func (c *Client) createTimedOut(ctx context.Context, s Submission, err error, w WaitOptions) *Outcome {
	msg := fmt.Sprintf("timed out after %s before run %s was created (%v)", c.opts.Clock.Now().Sub(w.Start).Round(100*time.Millisecond), s.RunID, err)
	cctx, done := c.bound(context.WithoutCancel(ctx), c.opts.Clock.Now().Add(cleanupTime))
	defer done()
	b, ferr := c.FindBuild(cctx, s.RunID)
	switch {
	case ferr != nil:
		msg += fmt.Sprintf("; whether a build was made is unknown (%v): look for meta-data run_id=%s", ferr, s.RunID)
	case b == nil:
		msg += "; no build was made"
	default:
		return c.cancel(ctx, b.Number, b, errors.New(msg), w)
	}
	return &Outcome{Status: TimedOut, Result: failed(msg)}
}

// Attach waits for an existing build and fetches its result, as Submit
// does after creating one (`kbgen wait`).
func (c *Client) Attach(ctx context.Context, number int, w WaitOptions) *Outcome {
	if w.Start.IsZero() {
		w.Start = c.opts.Clock.Now()
	}
	bctx, done := c.bound(ctx, w.Deadline)
	defer done()
	out := c.finish(ctx, bctx, number, w)
	out.Elapsed = c.opts.Clock.Now().Sub(w.Start)
	return out
}

// Fetch returns the result of a finished build without waiting (`kbgen
// result`). An unfinished build is TimedOut: no result yet.
func (c *Client) Fetch(ctx context.Context, number int) *Outcome {
	b, err := c.GetBuild(ctx, number)
	if err != nil {
		return &Outcome{Status: Infra, Result: failed(err.Error())}
	}
	if !b.Finished() {
		return &Outcome{Status: TimedOut, Build: b, Result: failed(fmt.Sprintf("build %d has not finished (state %s); `kbgen wait %d` waits for it", b.Number, b.State, b.Number))}
	}
	return c.resultOf(ctx, b)
}

// finish waits for the build and fetches its result under bctx (ctx with
// the deadline); a timeout or an interrupt cancels the build under ctx.
func (c *Client) finish(ctx, bctx context.Context, number int, w WaitOptions) *Outcome {
	b, err := c.Wait(bctx, number, w)
	if err != nil {
		switch {
		case pastDeadline(bctx, c.opts.Clock) && ctx.Err() == nil:
			if !errors.Is(err, ErrTimeout) {
				err = fmt.Errorf("%w after %s", ErrTimeout, c.opts.Clock.Now().Sub(w.Start).Round(100*time.Millisecond))
			}
			return c.cancel(ctx, number, b, err, w)
		case errors.Is(err, ErrTimeout) || ctx.Err() != nil:
			return c.cancel(ctx, number, b, err, w)
		}
		if b == nil && notFound(err) {
			// Never seen: no such build, not one running out of sight.
			return &Outcome{Status: Infra, Result: failed(fmt.Sprintf("build %d was not found (%v): check the number and that BUILDKITE_ORG and BUILDKITE_PIPELINE name the pipeline it was submitted to", number, err))}
		}
		return &Outcome{Status: Infra, Build: b, Result: failed(fmt.Sprintf("%v; the build may still be running: `kbgen wait %d` re-attaches", err, number))}
	}
	out := c.resultOf(bctx, b)
	if out.Status == Infra && pastDeadline(bctx, c.opts.Clock) {
		out.Status = TimedOut
		out.Result = failed(fmt.Sprintf("timed out after %s fetching the result of build %d (%s); `kbgen result %d` fetches it", c.opts.Clock.Now().Sub(w.Start).Round(100*time.Millisecond), b.Number, b.State, b.Number))
	}
	return out
}

func (c *Client) resultOf(ctx context.Context, b *Build) *Outcome {
	res, err := c.Result(ctx, b)
	if err != nil {
		return &Outcome{Status: Infra, Build: b, Result: failed(fmt.Sprintf("build %d %s, but its result could not be fetched: %v; `kbgen result %d` tries again", b.Number, b.State, err, b.Number))}
	}
	st := Obtained
	if !res.Success {
		st = RunnerFailed
	}
	return &Outcome{Status: st, Build: b, Result: res}
}

// cancel stops the build after a timeout or interrupt. It uses a context
// of its own: the caller's may be the one that was just canceled.
func (c *Client) cancel(ctx context.Context, number int, last *Build, why error, w WaitOptions) *Outcome {
	cctx, done := c.bound(context.WithoutCancel(ctx), c.opts.Clock.Now().Add(cleanupTime))
	defer done()
	state := "unknown"
	if last != nil {
		state = last.State
	}
	reason := why.Error()
	if !errors.Is(why, ErrTimeout) {
		reason = "interrupted"
		if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
			reason = "interrupted (" + cause.Error() + ")"
		}
	}
	msg := fmt.Sprintf("%s waiting for build %d (state %s)", reason, number, state)
	if err := c.CancelBuild(cctx, number); err != nil {
		msg += "; canceling it failed: " + err.Error()
	} else {
		msg += "; the build was canceled"
		if w.OnEvent != nil {
			w.OnEvent(Event{Kind: "canceled", Build: number, State: state, Elapsed: c.opts.Clock.Now().Sub(w.Start), Seconds: c.opts.Clock.Now().Sub(w.Start).Round(100 * time.Millisecond).Seconds()})
		}
	}
	return &Outcome{Status: TimedOut, Build: last, Result: failed(msg)}
}

// notFound reports whether err is Buildkite's 404.
func notFound(err error) bool {
	apiErr, ok := errors.AsType[*APIError](err)
	return ok && apiErr.Status == http.StatusNotFound
}
