package fakebuildkite

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// rateLimit is Buildkite's REST limit: a number of requests per fixed
// 60-second window for the whole organization, announced on every answer
// (RateLimit-Limit, RateLimit-Remaining, RateLimit-Reset in seconds) and
// enforced with 429 past it. A rejected request does not count.
type rateLimit struct {
	perMinute   int // 0: no limit
	windowStart time.Time
	used        int
	rejected    int
}

// RateLimitWindow is the length of one rate-limit window.
const RateLimitWindow = time.Minute

// SetRateLimit enforces perMinute API requests per window from now on
// (Buildkite's documented 200; 0 turns the limit off, the default).
func (s *Server) SetRateLimit(perMinute int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit = rateLimit{perMinute: perMinute}
}

// RateLimited is how many requests were answered 429 by the limit.
func (s *Server) RateLimited() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit.rejected
}

// limited sets the rate-limit headers on w and answers 429 when the
// window is spent; it reports whether it answered.
func (s *Server) limited(w http.ResponseWriter) bool {
	now := s.now()
	s.mu.Lock()
	l := &s.limit
	if l.perMinute <= 0 {
		s.mu.Unlock()
		return false
	}
	if l.windowStart.IsZero() {
		l.windowStart = now
	}
	if !now.Before(l.windowStart.Add(RateLimitWindow)) {
		n := now.Sub(l.windowStart) / RateLimitWindow
		l.windowStart = l.windowStart.Add(n * RateLimitWindow)
		l.used = 0
	}
	reset := int(math.Ceil(l.windowStart.Add(RateLimitWindow).Sub(now).Seconds()))
	over := l.used >= l.perMinute
	if over {
		l.rejected++
	} else {
		l.used++
	}
	remaining := l.perMinute - l.used
	limit := l.perMinute
	s.mu.Unlock()
	h := w.Header()
	h.Set("RateLimit-Limit", strconv.Itoa(limit))
	h.Set("RateLimit-Remaining", strconv.Itoa(remaining))
	h.Set("RateLimit-Reset", strconv.Itoa(reset))
	if over {
		writeJSON(w, http.StatusTooManyRequests, map[string]string{"message": "You have exceeded your REST API rate limit. Please wait before retrying."})
	}
	return over
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
