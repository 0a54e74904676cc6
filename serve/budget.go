package serve

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/exitcode"
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

// DefaultPerUser is kbgen's default budget per token: under Buildkite's
// documented 50 a minute per user (client.UserLimit) with room for the
// token's owner to look at a build by hand.
const DefaultPerUser = 45

// DefaultAPIBudget is kbgen serve's default share of the organization's
// minute, all tokens together: half of a new organization's 200
// (client.OrgLimit), the rest left to the organization's other users.
const DefaultAPIBudget = client.OrgLimit / 2

// CheckBudget refuses a budget Buildkite's limits cannot hold: apiBudget
// requests a minute over the organization's orgLimit, or perUser over a
// user's userLimit, would end in 429s whatever the service does
// (client.OrgLimit and client.UserLimit are a new organization's, per
// pages/apis/rest_api/rate_limits.md; an organization Buildkite gave
// more passes its own). Errors carry exitcode.Usage.
func CheckBudget(apiBudget, perUser, orgLimit, userLimit int) error {
	switch {
	case orgLimit < 1 || userLimit < 1:
		return exitcode.Usagef("--org-limit %d and --user-limit %d must be positive", orgLimit, userLimit)
	case apiBudget < 1 || apiBudget > orgLimit:
		return exitcode.Usagef("--api-budget %d is outside 1..%d: Buildkite allows an organization %d REST requests a minute (--org-limit; kbgen doctor --buildkite reads your organization's), shared with everyone in it", apiBudget, orgLimit, orgLimit)
	case perUser < 1 || perUser > userLimit:
		return exitcode.Usagef("--user-budget %d is outside 1..%d: Buildkite allows each user %d REST requests a minute (--user-limit)", perUser, userLimit, userLimit)
	}
	return nil
}

// Budget keeps kbgen's own use of the REST API under two limits at once,
// as Buildkite enforces them: PerMinute requests in any 61 seconds for all
// of kbgen together (its share of the organization's limit), and PerUser
// for each of its tokens (each a different Buildkite user: their
// per-user limits add up). Each request goes out with the token that has
// the most room. It also follows what Buildkite reports: when the
// organization's RateLimit-Remaining, or a token's
// RateLimit-User-Remaining, falls to Floor, that scope waits for its reset;
// a 429 waits for the reset of the scope its body names. So kbgen itself
// never causes a 429, and leaves the rest of the org limit to the org's
// other users.
type Budget struct {
	PerMinute int
	// PerUser bounds each token's requests in any Window.
	PerUser int
	// PollShare is the part of the effective budget creates may not use,
	// kept for the watcher's polls and for result fetches.
	PollShare int
	// Floor is the RateLimit-Remaining (either scope) under which kbgen
	// stops until that window resets.
	Floor int

	mu        sync.Mutex
	sent      []sent // in the last minute, oldest first
	users     []user // one per token
	tokens    []string
	orgLeft   int // -1: unknown
	orgReset  time.Time
	waiting   int
	urgent    int // Urgent requests waiting: polls and creates let them go first
	now       func() time.Time
	changed   chan struct{}
	totalSent int64
	// record, when set, is told every answer (fleet.go's metrics).
	record func(c Class, status int, scope string)
}

type sent struct {
	at    time.Time
	class Class
}

// user is one token's own window and what Buildkite said of it.
type user struct {
	sent  []time.Time
	left  int // RateLimit-User-Remaining; -1: unknown
	reset time.Time
}

// NewBudget returns a budget of perMinute requests with the client's one
// token, half of them kept for polls and result fetches.
func NewBudget(perMinute int) *Budget {
	return NewUserBudget(perMinute, perMinute, nil)
}

// NewUserBudget returns a budget of orgShare requests a minute in all and
// perUser for each token; with tokens (two or more users) every request
// carries the token chosen for it, without, the client's own. Half of
// the effective budget is kept for polls and result fetches.
func NewUserBudget(orgShare, perUser int, tokens []string) *Budget {
	orgShare, perUser = max(orgShare, 5), max(perUser, 5)
	n := max(len(tokens), 1)
	b := &Budget{PerMinute: orgShare, PerUser: perUser, Floor: 2, orgLeft: -1, now: time.Now, changed: make(chan struct{}),
		users: make([]user, n), tokens: tokens}
	for i := range b.users {
		b.users[i].left = -1
	}
	b.PollShare = b.Effective() / 2
	return b
}

// Effective is the most requests a minute the budget allows: kbgen's share
// of the organization, or all its tokens' per-user budgets if fewer.
func (b *Budget) Effective() int {
	return min(b.PerMinute, b.PerUser*len(b.users))
}

// Users is the number of tokens the budget rotates.
func (b *Budget) Users() int { return len(b.users) }

// Acquire waits until a request of class c fits, then counts it against
// the token it returns (an index into the budget's tokens). onWait, when
// not nil, is called once if it has to wait.
func (b *Budget) Acquire(ctx context.Context, c Class, onWait func()) (int, error) {
	waited := false
	for {
		b.mu.Lock()
		now := b.now()
		b.expire(now)
		d, u := b.delay(now, c)
		if d <= 0 {
			b.sent = append(b.sent, sent{now, c})
			b.users[u].sent = append(b.users[u].sent, now)
			b.totalSent++
			if waited {
				b.waiting--
				if c == Urgent {
					b.urgent--
				}
			}
			b.mu.Unlock()
			return u, nil
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
			return 0, ctx.Err()
		case <-t.C:
		case <-ch:
			t.Stop()
		}
	}
}

// delay is how long a request of class c must wait from now (0: go), and
// the token it goes with when it may.
func (b *Budget) delay(now time.Time, c Class) (time.Duration, int) {
	if b.orgLeft >= 0 && b.orgLeft <= b.Floor && now.Before(b.orgReset) {
		return b.orgReset.Sub(now), 0
	}
	if len(b.sent) >= b.PerMinute {
		return b.sent[0].at.Add(Window).Sub(now) + time.Millisecond, 0
	}
	u, wait := b.pickUser(now)
	if wait > 0 {
		return wait, 0
	}
	if c != Urgent && b.urgent > 0 {
		// A result fetch or a cancel is waiting: it goes first.
		return 50 * time.Millisecond, 0
	}
	if c == Create {
		// Creates count against the effective budget less PollShare, so a
		// burst of submissions never starves the polls that detect
		// completion.
		n, oldest := 0, time.Time{}
		for _, s := range b.sent {
			if s.class == Create {
				if n == 0 {
					oldest = s.at
				}
				n++
			}
		}
		if n >= b.Effective()-b.PollShare {
			return oldest.Add(Window).Sub(now) + time.Millisecond, 0
		}
	}
	return 0, u
}

// pickUser is the token with the most room now, or, when none has any,
// how long until the first one does.
func (b *Budget) pickUser(now time.Time) (int, time.Duration) {
	best, bestSent, soonest := -1, 0, time.Duration(0)
	for i := range b.users {
		u := &b.users[i]
		var wait time.Duration
		switch {
		case u.left >= 0 && u.left <= b.Floor && now.Before(u.reset):
			wait = u.reset.Sub(now)
		case len(u.sent) >= b.PerUser:
			wait = u.sent[0].Add(Window).Sub(now) + time.Millisecond
		}
		if wait > 0 {
			if soonest == 0 || wait < soonest {
				soonest = wait
			}
			continue
		}
		if best < 0 || len(u.sent) < bestSent {
			best, bestSent = i, len(u.sent)
		}
	}
	if best < 0 {
		return 0, soonest
	}
	return best, 0
}

func (b *Budget) expire(now time.Time) {
	b.sent = expired(b.sent, func(s sent) time.Time { return s.at }, now)
	for i := range b.users {
		b.users[i].sent = expired(b.users[i].sent, func(t time.Time) time.Time { return t }, now)
	}
}

// expired drops the entries older than Window from the front of xs.
func expired[T any](xs []T, at func(T) time.Time, now time.Time) []T {
	i := 0
	for i < len(xs) && !now.Before(at(xs[i]).Add(Window)) {
		i++
	}
	return xs[i:]
}

// Ready is how long a request of class c would wait now (0: none).
func (b *Budget) Ready(c Class) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	b.expire(now)
	d, _ := b.delay(now, c)
	return max(d, 0)
}

// Observe reads both of Buildkite's header sets from the answer to a
// request made with token u: RateLimit-Remaining/-Reset (the
// organization) and RateLimit-User-Remaining/-Reset (the token's user).
// A 429 counts as nothing left in the scope its body names (scope
// "rest_user" or "rest"; no Retry-After is documented, one is obeyed if
// sent) until that scope's reset; a 429 naming neither stops both.
func (b *Budget) Observe(u int, status int, h http.Header, scope string) {
	orgLeft, orgReset, orgOK := client.LimitLeft(h, client.ScopeOrg)
	userLeft, userReset, userOK := client.LimitLeft(h, client.ScopeUser)
	if status == http.StatusTooManyRequests {
		ra, raOK := retryAfter(h)
		if scope != client.ScopeUser {
			orgLeft, orgReset, orgOK = 0, firstOK(ra, raOK, orgReset, orgOK), true
		}
		if scope != client.ScopeOrg {
			userLeft, userReset, userOK = 0, firstOK(ra, raOK, userReset, userOK), true
		}
	}
	b.mu.Lock()
	now := b.now()
	if orgOK {
		b.orgLeft, b.orgReset = orgLeft, now.Add(orgReset)
	}
	if userOK && u >= 0 && u < len(b.users) {
		b.users[u].left, b.users[u].reset = userLeft, now.Add(userReset)
	}
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// firstOK is a if ok, else b if bOK, else the 5 s a 429 without any reset
// waits.
func firstOK(a time.Duration, ok bool, b time.Duration, bOK bool) time.Duration {
	switch {
	case ok:
		return a
	case bOK:
		return b
	}
	return 5 * time.Second
}

// retryAfter reads a Retry-After in seconds (not documented for
// Buildkite's 429s; obeyed if one comes).
func retryAfter(h http.Header) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(h.Get("Retry-After")), 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// Stats is a snapshot of the budget.
type Stats struct {
	InLastMinute int `json:"in_last_minute"`
	Waiting      int `json:"waiting"`
	OrgRemaining int `json:"org_remaining"` // -1: not known yet
	// UserRemaining is each token's RateLimit-User-Remaining (-1: not known).
	UserRemaining []int `json:"user_remaining"`
	Sent          int64 `json:"sent"`
}

// Stats reports the budget's use now.
func (b *Budget) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.expire(b.now())
	st := Stats{InLastMinute: len(b.sent), Waiting: b.waiting, OrgRemaining: b.orgLeft, Sent: b.totalSent}
	for _, u := range b.users {
		st.UserRemaining = append(st.UserRemaining, u.left)
	}
	return st
}

// Transport puts every request through the budget: it waits for its
// place, sends it with the token chosen for it (when the budget rotates
// tokens), then reads the rate-limit headers of the answer, and of a 429
// its body's scope. It sits under the client's retry layer, so each try
// counts.
func (b *Budget) Transport(next http.RoundTripper) http.RoundTripper {
	return budgetTransport{b, next}
}

type budgetTransport struct {
	b    *Budget
	next http.RoundTripper
}

func (t budgetTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	u, err := t.b.Acquire(req.Context(), classOf(req.Context()), nil)
	if err != nil {
		return nil, err
	}
	if len(t.b.tokens) > 0 {
		req = req.Clone(req.Context())
		req.Header.Set("Authorization", "Bearer "+t.b.tokens[u])
	}
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	scope := client.LimitScope(resp)
	t.b.Observe(u, resp.StatusCode, resp.Header, scope)
	if t.b.record != nil {
		t.b.record(classOf(req.Context()), resp.StatusCode, scope)
	}
	return resp, nil
}
