package client

import (
	"context"
	"time"
)

// A deadline on the client's clock (kbgen submit --timeout) bounds every
// phase of a submission, not just the wait: the create and its retries,
// the polls' retries, the result fetch. It rides on the context so that
// every sleep of the retry layer sees it; on the real clock the context
// also gets it as its own deadline, so a request in flight is cut too.

type deadlineKey struct{}

// bound returns ctx carrying deadline (none when it is zero).
func (c *Client) bound(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	if deadline.IsZero() {
		return ctx, func() {}
	}
	ctx = context.WithValue(ctx, deadlineKey{}, deadline)
	if _, real := c.opts.Clock.(RealClock); real {
		return context.WithDeadline(ctx, deadline)
	}
	return ctx, func() {}
}

// pastDeadline reports whether ctx's deadline (on the client's clock) has
// passed.
func pastDeadline(ctx context.Context, clock Clock) bool {
	dl, ok := ctx.Value(deadlineKey{}).(time.Time)
	return ok && !clock.Now().Before(dl)
}

// sleepBounded sleeps d on clock, but never past ctx's deadline: a wait
// that would end after it sleeps until the deadline and returns
// ErrTimeout.
func sleepBounded(ctx context.Context, clock Clock, d time.Duration) error {
	if dl, ok := ctx.Value(deadlineKey{}).(time.Time); ok {
		if left := dl.Sub(clock.Now()); left <= d {
			if err := clock.Sleep(ctx, max(left, 0)); err != nil && ctx.Err() != context.DeadlineExceeded {
				return err
			}
			return ErrTimeout
		}
	}
	return clock.Sleep(ctx, d)
}
