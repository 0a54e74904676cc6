package serve

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Class is what a request is for; the budget serves them in different
// orders when it runs short.
type Class int

const (
	// Urgent requests (result fetches, cancels, the startup scan) only wait
	// for the budget itself.
	Urgent Class = iota
	// Poll requests are the watcher's list requests.
	Poll
	// Create requests may only use what the polls' share leaves: under load
	// creates queue, detection does not slow down.
	Create
)

type classKey struct{}

// WithClass marks ctx's requests as class c for the budget.
func WithClass(ctx context.Context, c Class) context.Context {
	return context.WithValue(ctx, classKey{}, c)
}

func classOf(ctx context.Context) Class {
	if c, ok := ctx.Value(classKey{}).(Class); ok {
		return c
	}
	return Urgent
}

// Window is the budget's sliding window: a minute, plus a second for the
// time a request takes to reach Buildkite, so that no 60 seconds of
// arrivals there hold more than the budget.
const Window = 61 * time.Second

// Budget keeps kbgen's own use of the organization's REST API under
// PerMinute requests in any 60 seconds (a sliding window, so no minute
// ever sees more), and under what the organization has left: when
// Buildkite's RateLimit-Remaining falls to Floor, every request waits for
// RateLimit-Reset. So kbgen itself never causes a 429, and leaves the rest
// of the org limit to the org's other users.
type Budget struct {
	PerMinute int
	// PollShare is the part of PerMinute creates may not use, kept for the
	// watcher's polls and for result fetches.
	PollShare int
	// Floor is the organization's RateLimit-Remaining under which kbgen
	// stops until the window resets.
	Floor int

	mu        sync.Mutex
	sent      []sent // in the last minute, oldest first
	orgLeft   int    // -1: unknown
	orgReset  time.Time
	waiting   int
	urgent    int // Urgent requests waiting: polls and creates let them go first
	now       func() time.Time
	changed   chan struct{}
	totalSent int64
}

type sent struct {
	at    time.Time
	class Class
}

// NewBudget returns a budget of perMinute requests, half of them kept for
// polls and result fetches.
func NewBudget(perMinute int) *Budget {
	if perMinute < 5 {
		perMinute = 5
	}
	return &Budget{PerMinute: perMinute, PollShare: perMinute / 2, Floor: 2, orgLeft: -1, now: time.Now, changed: make(chan struct{})}
}

// Acquire waits until a request of class c fits, then counts it. onWait,
// when not nil, is called once if it has to wait.
func (b *Budget) Acquire(ctx context.Context, c Class, onWait func()) error {
	waited := false
	for {
		b.mu.Lock()
		now := b.now()
		b.expire(now)
		d := b.delay(now, c)
		if d <= 0 {
			b.sent = append(b.sent, sent{now, c})
			b.totalSent++
			if waited {
				b.waiting--
				if c == Urgent {
					b.urgent--
				}
			}
			b.mu.Unlock()
			return nil
		}
		if !waited {
			waited = true
			b.waiting++
			if c == Urgent {
				b.urgent++
			}
			if onWait != nil {
				b.mu.Unlock()
				onWait()
				b.mu.Lock()
			}
		}
		ch := b.changed
		b.mu.Unlock()
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			b.mu.Lock()
			b.waiting--
			if c == Urgent {
				b.urgent--
			}
			b.mu.Unlock()
			return ctx.Err()
		case <-t.C:
		case <-ch:
			t.Stop()
		}
	}
}

// delay is how long a request of class c must wait from now (0: go).
func (b *Budget) delay(now time.Time, c Class) time.Duration {
	if b.orgLeft >= 0 && b.orgLeft <= b.Floor && now.Before(b.orgReset) {
		return b.orgReset.Sub(now)
	}
	if len(b.sent) >= b.PerMinute {
		return b.sent[0].at.Add(Window).Sub(now) + time.Millisecond
	}
	if c != Urgent && b.urgent > 0 {
		// A result fetch or a cancel is waiting: it goes first.
		return 50 * time.Millisecond
	}
	if c == Create {
		// Creates count against PerMinute-PollShare, so a burst of
		// submissions never starves the polls that detect completion.
		n, oldest := 0, time.Time{}
		for _, s := range b.sent {
			if s.class == Create {
				if n == 0 {
					oldest = s.at
				}
				n++
			}
		}
		if n >= b.PerMinute-b.PollShare {
			return oldest.Add(Window).Sub(now) + time.Millisecond
		}
	}
	return 0
}

func (b *Budget) expire(now time.Time) {
	i := 0
	for i < len(b.sent) && !now.Before(b.sent[i].at.Add(Window)) {
		i++
	}
	b.sent = b.sent[i:]
}

// Ready is how long a request of class c would wait now (0: none).
func (b *Budget) Ready(c Class) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.expire(now)
	return max(b.delay(now, c), 0)
}

// Observe reads Buildkite's RateLimit-Remaining and RateLimit-Reset from an
// answer. A 429 (someone else spent the org's budget) counts as nothing
// left until the reset.
func (b *Budget) Observe(status int, h http.Header) {
	left, lerr := strconv.Atoi(strings.TrimSpace(h.Get("RateLimit-Remaining")))
	reset, rerr := strconv.ParseFloat(strings.TrimSpace(h.Get("RateLimit-Reset")), 64)
	if status == http.StatusTooManyRequests {
		left, lerr = 0, nil
		if ra, err := strconv.ParseFloat(strings.TrimSpace(h.Get("Retry-After")), 64); err == nil {
			reset, rerr = ra, nil
		} else if rerr != nil {
			reset, rerr = 5, nil
		}
	}
	if lerr != nil || rerr != nil {
		return
	}
	b.mu.Lock()
	b.orgLeft = left
	b.orgReset = b.now().Add(time.Duration(reset * float64(time.Second)))
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// Stats is a snapshot of the budget.
type Stats struct {
	InLastMinute int   `json:"in_last_minute"`
	Waiting      int   `json:"waiting"`
	OrgRemaining int   `json:"org_remaining"` // -1: not known yet
	Sent         int64 `json:"sent"`
}

// Stats reports the budget's use now.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(b.now())
	return Stats{InLastMinute: len(b.sent), Waiting: b.waiting, OrgRemaining: b.orgLeft, Sent: b.totalSent}
}

// Transport puts every request through the budget: it waits for its
// place, then reads the rate-limit headers of the answer. It sits under
// the client's retry layer, so each try counts.
func (b *Budget) Transport(next http.RoundTripper) http.RoundTripper {
	return budgetTransport{b, next}
}

type budgetTransport struct {
	b    *Budget
	next http.RoundTripper
}

func (t budgetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.b.Acquire(req.Context(), classOf(req.Context()), nil); err != nil {
		return nil, err
	}
	resp, err := t.next.RoundTrip(req)
	if err == nil {
		t.b.Observe(resp.StatusCode, resp.Header)
	}
	return resp, err
}
