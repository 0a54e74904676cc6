package fakebuildkite

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// Buildkite's REST limits, as pages/apis/rest_api/rate_limits.md (buildkite/docs)
// documents them: two limits, and a request is rejected if either is
// exceeded. The organization's (default 200 a minute, scope "rest",
// headers RateLimit-*) is shared by every user of the organization; the
// per-user one (default 50 a minute, scope "rest_user", headers
// RateLimit-User-*) is the token's user's. Every answer carries both header
// sets; a 429 names the scope exceeded in its JSON body, with limit,
// current and reset, and no Retry-After. While a limit is exhausted its
// answers also carry RateLimit-Warning / RateLimit-User-Warning.
//
// What the page leaves open, the stand-in decides the strict way (see
// docs/testing.md): each limit counts fixed 60-second windows from its
// first request; every request counts in "current", rejected ones
// included (the page's example body has current 55 over limit 50), so a
// client that keeps knocking only learns it must wait; when both limits
// are exceeded the body names the organization's.

// Documented scopes of the two limits.
const (
	ScopeOrg  = "rest"
	ScopeUser = "rest_user"
)

// DefaultOrgLimit and DefaultUserLimit are a new organization's limits.
const (
	DefaultOrgLimit  = 200
	DefaultUserLimit = 50
)

// window is one limit's fixed window.
type window struct {
	perMinute int // 0: no limit
	start     time.Time
	current   int
}

// take counts a request at now and reports whether it is within the
// limit, with what remains and the seconds to the window's end.
func (w *window) take(now time.Time) (ok bool, remaining, reset int) {
	if w.start.IsZero() || !now.Before(w.start.Add(RateLimitWindow)) {
		w.start, w.current = now, 0
	}
	w.current++
	reset = int(math.Ceil(w.start.Add(RateLimitWindow).Sub(now).Seconds()))
	return w.current <= w.perMinute, max(w.perMinute-w.current, 0), reset
}

// rateLimit is both limits and what they rejected.
type rateLimit struct {
	org      window
	userLim  int
	users    map[string]*window // by user
	rejected map[string]int     // by scope
}

// RateLimitWindow is the length of one rate-limit window.
const RateLimitWindow = time.Minute

// SetRateLimit enforces perMinute API requests per window for the whole
// organization from now on (0 turns it off, the default).
func (s *Server) SetRateLimit(perMinute int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit.org = window{perMinute: perMinute}
}

// SetUserRateLimit enforces perMinute API requests per window for each
// user (each token's owner, see AddToken) from now on (0: off).
func (s *Server) SetUserRateLimit(perMinute int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit.userLim = perMinute
	s.limit.users = map[string]*window{}
}

// SetDefaultRateLimits enforces a new organization's documented limits:
// 200 a minute for the organization, 50 for each user.
func (s *Server) SetDefaultRateLimits() {
	s.SetRateLimit(DefaultOrgLimit)
	s.SetUserRateLimit(DefaultUserLimit)
}

// AddToken makes token a valid API token of user (Token belongs to user
// "kbgen"). Two tokens of one user share its per-user limit.
func (s *Server) AddToken(token, user string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[token] = user
}

// RateLimited is how many requests were answered 429, either scope.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit.rejected[ScopeOrg] + s.limit.rejected[ScopeUser]
}

// RateLimitedIn is how many requests were answered 429 naming scope.
func (s *Server) RateLimitedIn(scope string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit.rejected[scope]
}

// limited counts the request against the organization and its token's
// user, sets both header sets on w and answers 429 when either limit is
// exceeded; it reports whether it answered. A request without a known
// token counts against the organization only (it is refused 401 after).
func (s *Server) limited(w http.ResponseWriter, r *http.Request) bool {
	now := s.now()
	s.mu.Lock()
	l := &s.limit
	h := w.Header()
	var over *rateBody
	if l.org.perMinute > 0 {
		ok, remaining, reset := l.org.take(now)
		h.Set("RateLimit-Scope", ScopeOrg)
		h.Set("RateLimit-Limit", strconv.Itoa(l.org.perMinute))
		h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
		h.Set("RateLimit-Reset", strconv.Itoa(reset))
		if remaining == 0 {
			h.Set("RateLimit-Warning", "You have exceeded your API rate limit.")
		}
		if !ok {
			over = &rateBody{Scope: ScopeOrg, Limit: l.org.perMinute, Current: l.org.current, Reset: reset}
		}
	}
	if user, known := s.tokens[bearer(r)]; known && l.userLim > 0 {
		uw := l.users[user]
		if uw == nil {
			uw = &window{perMinute: l.userLim}
			l.users[user] = uw
		}
		ok, remaining, reset := uw.take(now)
		h.Set("RateLimit-User-Scope", ScopeUser)
		h.Set("RateLimit-User-Limit", strconv.Itoa(l.userLim))
		h.Set("RateLimit-User-Remaining", strconv.Itoa(remaining))
		h.Set("RateLimit-User-Reset", strconv.Itoa(reset))
		if remaining == 0 {
			h.Set("RateLimit-User-Warning", "You have exceeded your API rate limit.")
		}
		if !ok && over == nil {
			over = &rateBody{Scope: ScopeUser, Limit: l.userLim, Current: uw.current, Reset: reset}
		}
	}
	if over != nil {
		l.rejected[over.Scope]++
	}
	s.mu.Unlock()
	if over == nil {
		return false
	}
	over.Message = "You have exceeded your API rate limit. Please wait " + strconv.Itoa(over.Reset) + " seconds before making more requests."
	writeJSON(w, http.StatusTooManyRequests, over)
	return true
}

// rateBody is the documented 429 body.
type rateBody struct {
	Message string `json:"message"`
	Scope   string `json:"scope"`
	Limit   int    `json:"limit"`
	Current int    `json:"current"`
	Reset   int    `json:"reset"`
}

func bearer(r *http.Request) string {
	const p = "Bearer "
	if v := r.Header.Get("Authorization"); len(v) > len(p) && v[:len(p)] == p {
		return v[len(p):]
	}
	return ""
}

// MaxRequestsIn is the most API requests (429s included) the server saw
// in any span of length d: a sliding window over every request.
func (s *Server) MaxRequestsIn(d time.Duration) int {
	var at []time.Time
	for _, r := range s.Requests() {
		if r.Server == "api" {
			at = append(at, r.At)
		}
	}
	best, lo := 0, 0
	for hi := range at {
		for at[hi].Sub(at[lo]) >= d {
			lo++
		}
		best = max(best, hi-lo+1)
	}
	return best
}
