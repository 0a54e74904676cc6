package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Retry bounds how the client retries a request that failed for reasons
// other than the request itself: 5xx, 429, dropped connections, slow
// responses.
type Retry struct {
	// Attempts is the most tries per request (first try included).
	Attempts int
	// BaseDelay is the first backoff; each retry doubles it, with full
	// jitter so that many submitters do not retry in step.
	BaseDelay time.Duration
	// MaxDelay caps one backoff wait.
	MaxDelay time.Duration
	// MaxRateLimitWait caps a wait that Retry-After or RateLimit-Reset asks
	// for; a server asking for longer is treated as a failure, not obeyed.
	MaxRateLimitWait time.Duration
}

// DefaultRetry gives up after about half a minute of 5xx or resets.
var DefaultRetry = Retry{Attempts: 6, BaseDelay: 500 * time.Millisecond, MaxDelay: 8 * time.Second, MaxRateLimitWait: 60 * time.Second}

// transport retries, counts and logs requests. It sits under go-buildkite
// (whose own 429 retry waits up to 15 minutes and ignores Retry-After) and
// never hands it a 429: when retries run out it returns an error instead.
type transport struct {
	base     http.RoundTripper
	retry    Retry
	clock    Clock
	debug    io.Writer // nil: no request log
	redact   func(string) string
	requests atomic.Int64
	name     string // "api" or "storage", for the request log
	// hold: after an answer says a limit has nothing left, the next try
	// waits for that limit's reset instead of earning a 429 (off when
	// kbgen serve's budget, which does the same per token, is below).
	hold     bool
	holdMu   sync.Mutex
	holdTill time.Time
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	for attempt := 1; ; attempt++ {
		if attempt > 1 && req.Body != nil {
			if req.GetBody == nil {
				return nil, &retryError{msg: "request body cannot be replayed"}
			}
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req = req.Clone(ctx)
			req.Body = body
		}
		if err := t.waitHold(ctx); err != nil {
			return nil, err
		}
		realStart := time.Now()
		t.requests.Add(1)
		resp, err := t.base.RoundTrip(req)
		if err == nil {
			t.observe(resp.Header)
		}
		took := time.Since(realStart)
		wait, retryable, why := t.classify(req, resp, err, attempt)
		t.logf("%s %s %s → %s in %s", t.name, req.Method, t.logURL(req.URL), outcome(resp, err), took.Round(time.Millisecond))
		if !retryable {
			if err != nil {
				return nil, err
			}
			return resp, nil
		}
		if wait < 0 {
			resp.Body.Close()
			return nil, &retryError{msg: why, permanent: true}
		}
		if attempt >= t.retry.Attempts {
			// A last 5xx goes up as the response, so the caller reports
			// Buildkite's own status and message; a 429 never does (see
			// the type comment), nor does a dropped connection.
			if resp != nil && resp.StatusCode != http.StatusTooManyRequests {
				return resp, nil
			}
			if resp != nil {
				resp.Body.Close()
			}
			return nil, &retryError{msg: fmt.Sprintf("%s (gave up after %d attempts)", why, attempt)}
		}
		if resp != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		t.logf("%s retry %d/%d in %s: %s", t.name, attempt, t.retry.Attempts-1, wait.Round(time.Millisecond), why)
		if err := sleepBounded(ctx, t.clock, wait); err != nil {
			return nil, &retryError{msg: fmt.Sprintf("%s (stopped retrying: %v)", why, err)}
		}
	}
}

// observe holds further tries when an answer says either scope has
// nothing left (rate_limits.md: "You should not make any further requests
// until the relevant RateLimit-Reset or RateLimit-User-Reset").
func (t *transport) observe(h http.Header) {
	if !t.hold {
		return
	}
	for _, scope := range []string{ScopeOrg, ScopeUser} {
		if left, reset, ok := LimitLeft(h, scope); ok && left <= 0 {
			till := t.clock.Now().Add(reset)
			t.holdMu.Lock()
			if till.After(t.holdTill) {
				t.holdTill = till
			}
			t.holdMu.Unlock()
		}
	}
}

// waitHold waits out a hold, or fails when it is longer than a 429 would
// be allowed to make us wait.
func (t *transport) waitHold(ctx context.Context) error {
	t.holdMu.Lock()
	d := t.holdTill.Sub(t.clock.Now())
	t.holdMu.Unlock()
	if d <= 0 {
		return nil
	}
	if d > t.retry.MaxRateLimitWait {
		return &retryError{msg: fmt.Sprintf("rate limit spent for %s, more than the %s allowed", d.Round(time.Second), t.retry.MaxRateLimitWait), permanent: true}
	}
	t.logf("%s rate limit spent: waiting %s for its reset", t.name, d.Round(time.Millisecond))
	if err := sleepBounded(ctx, t.clock, d); err != nil {
		return &retryError{msg: fmt.Sprintf("rate limit spent (stopped waiting: %v)", err)}
	}
	return nil
}

// retryError is the reason a request was given up on; its text is already
// fit to print.
type retryError struct {
	msg string
	// permanent: the server asked us to stay away longer than we wait, so
	// polling on would be rude and useless.
	permanent bool
}

func (e *retryError) Error() string { return e.msg }

// classify decides whether a try is retried and how long to wait first;
// a negative wait means give up now.
func (t *transport) classify(req *http.Request, resp *http.Response, err error, attempt int) (time.Duration, bool, string) {
	if err != nil {
		if req.Context().Err() != nil {
			return 0, false, ""
		}
		if req.Method == http.MethodPost && !neverSent(err) {
			return 0, false, ""
		}
		return t.backoff(attempt), true, describeNetErr(err)
	}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		// Buildkite answers 429 before doing anything, so even a POST is
		// safe to repeat.
		if d, ok := limitWait(resp.Header, LimitScope(resp), t.clock.Now()); ok {
			if d > t.retry.MaxRateLimitWait {
				// Obeying would hold the submission hostage; failing now
				// lets the caller re-attach later.
				return -1, true, fmt.Sprintf("rate limited (429) and asked to wait %s, more than the %s allowed", d, t.retry.MaxRateLimitWait)
			}
			return d, true, fmt.Sprintf("rate limited (429), waiting %s as asked", d.Round(time.Millisecond))
		}
		return t.backoff(attempt), true, "rate limited (429)"
	// A POST that may have reached Buildkite is not blindly re-sent:
	// CreateBuild looks the build up by run id instead.
	case resp.StatusCode >= 500 && resp.StatusCode != http.StatusNotImplemented && req.Method != http.MethodPost:
		return t.backoff(attempt), true, fmt.Sprintf("server error %d", resp.StatusCode)
	}
	return 0, false, ""
}

// backoff is exponential with full jitter: uniform in [d/2, d].
func (t *transport) backoff(attempt int) time.Duration {
	d := t.retry.BaseDelay << (attempt - 1)
	if d > t.retry.MaxDelay || d <= 0 {
		d = t.retry.MaxDelay
	}
	return d/2 + time.Duration(rand.Int64N(int64(d/2)+1))
}

// neverSent reports errors that prove the request did not reach the
// server, so even a POST may be repeated.
func neverSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func describeNetErr(err error) string {
	var ne net.Error
	switch {
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection dropped"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.As(err, &ne) && ne.Timeout():
		return "no response in time"
	}
	return "request failed: " + err.Error()
}

func outcome(resp *http.Response, err error) string {
	if err != nil {
		return describeNetErr(err)
	}
	return strconv.Itoa(resp.StatusCode)
}

// logURL keeps a storage URL's query out of the log: it is the signature
// that grants access to the artifact.
func (t *transport) logURL(u *url.URL) string {
	if t.name != "storage" || u.RawQuery == "" {
		return u.Redacted()
	}
	c := *u
	c.RawQuery = ""
	return c.Redacted() + "?[signature omitted]"
}

func (t *transport) logf(format string, args ...any) {
	if t.debug == nil {
		return
	}
	// Headers are never logged; the redactor is a second line of defence
	// for a token that shows up in a URL or an error text.
	fmt.Fprintln(t.debug, t.redact("debug: "+fmt.Sprintf(format, args...)))
}
