package client

import (
	"net/http"
	"testing"
	"time"
)

func TestLimitWait(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	tests := []struct {
		name    string
		headers map[string]string
		scope   string // the 429 body's
		want    time.Duration
		ok      bool
	}{
		{"seconds", map[string]string{"Retry-After": "7"}, "", 7 * time.Second, true},
		{"fractional", map[string]string{"Retry-After": "0.5"}, "", 500 * time.Millisecond, true},
		{"http date", map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, "", 90 * time.Second, true},
		{"date in the past", map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)}, "", 0, true},
		{"ratelimit reset", map[string]string{"RateLimit-Reset": "42"}, "", 42 * time.Second, true},
		// rate_limits.md: the body's scope says which limit was exceeded,
		// and its reset is the one to wait for.
		{"user scope", map[string]string{"RateLimit-Reset": "5", "RateLimit-User-Reset": "42"}, ScopeUser, 42 * time.Second, true},
		{"org scope", map[string]string{"RateLimit-Reset": "30", "RateLimit-User-Reset": "42"}, ScopeOrg, 30 * time.Second, true},
		{"no scope: the later reset", map[string]string{"RateLimit-Reset": "30", "RateLimit-User-Reset": "42"}, "", 42 * time.Second, true},
		{"user scope without its header", map[string]string{"RateLimit-Reset": "30"}, ScopeUser, 30 * time.Second, true},
		{"retry-after wins", map[string]string{"Retry-After": "3", "RateLimit-Reset": "42"}, "", 3 * time.Second, true},
		{"garbage", map[string]string{"Retry-After": "soon"}, "", 0, false},
		{"negative", map[string]string{"Retry-After": "-4"}, "", 0, false},
		{"none", nil, "", 0, false},
	}
	for _, tt := range tests {
		h := http.Header{}
		for k, v := range tt.headers {
			h.Set(k, v)
		}
		got, ok := limitWait(h, tt.scope, now)
		if got != tt.want || ok != tt.ok {
			t.Errorf("%s: limitWait = %s, %v; want %s, %v", tt.name, got, ok, tt.want, tt.ok)
		}
	}
}

func TestBackoffIsJitteredAndBounded(t *testing.T) {
	t.Parallel()
	tr := &transport{retry: DefaultRetry}
	for attempt := 1; attempt <= 12; attempt++ {
		ceiling := min(DefaultRetry.BaseDelay<<(attempt-1), DefaultRetry.MaxDelay)
		seen := map[time.Duration]bool{}
		for i := 0; i < 50; i++ {
			d := tr.backoff(attempt)
			if d < ceiling/2 || d > ceiling {
				t.Fatalf("attempt %d: backoff %s outside [%s, %s]", attempt, d, ceiling/2, ceiling)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("attempt %d: only %d distinct waits in 50: not jittered", attempt, len(seen))
		}
	}
}
