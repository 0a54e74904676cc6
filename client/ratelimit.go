package client

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Buildkite's REST rate limits, as pages/apis/rest_api/rate_limits.md (in
// buildkite/docs) documents them: two limits, the organization's (scope
// "rest", headers RateLimit-Remaining/-Limit/-Reset/-Scope) and the
// token's user's (scope "rest_user", headers RateLimit-User-*), both on
// every answer; a request past either is answered 429 with a JSON body
// naming the scope exceeded, and no Retry-After is documented.
const (
	ScopeOrg  = "rest"
	ScopeUser = "rest_user"
	// OrgLimit and UserLimit are a new organization's defaults, per minute.
	OrgLimit  = 200
	UserLimit = 50
)

// LimitScope reads the scope a 429 answer names in its body, and puts the
// body back for whoever reads it next. "" when the body names none.
func LimitScope(resp *http.Response) string {
	if resp == nil || resp.StatusCode != http.StatusTooManyRequests || resp.Body == nil {
		return ""
	}
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(data))
	var body struct {
		Scope string `json:"scope"`
	}
	_ = json.Unmarshal(data, &body)
	return body.Scope
}

// LimitLeft is what Buildkite says is left in scope: its Remaining and
// the time to its Reset. ok is false when the answer lacks either.
func LimitLeft(h http.Header, scope string) (left int, reset time.Duration, ok bool) {
	n, err := strconv.Atoi(strings.TrimSpace(h.Get(limitHeader(scope, "Remaining"))))
	if err != nil {
		return 0, 0, false
	}
	r, ok := limitReset(h, scope)
	return n, r, ok
}

// limitHeader is the header of one scope: RateLimit-Reset, or
// RateLimit-User-Reset for the user's.
func limitHeader(scope, field string) string {
	if scope == ScopeUser {
		return "RateLimit-User-" + field
	}
	return "RateLimit-" + field
}

func limitReset(h http.Header, scope string) (time.Duration, bool) {
	return seconds(h.Get(limitHeader(scope, "Reset")))
}

// seconds parses a non-negative number of seconds.
func seconds(v string) (time.Duration, bool) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || f < 0 {
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

// limitWait is how long a 429 asks to wait: Retry-After if sent (not
// documented, obeyed anyway), else the reset of the scope the body names,
// else the later of the two resets (the exceeded one is the one with
// nothing left, but a body that names none leaves it open).
func limitWait(h http.Header, scope string, now time.Time) (time.Duration, bool) {
	if v := strings.TrimSpace(h.Get("Retry-After")); v != "" {
		if d, ok := seconds(v); ok {
			return d, true
		}
		if at, err := http.ParseTime(v); err == nil {
			return max(at.Sub(now), 0), true
		}
	}
	org, orgOK := limitReset(h, ScopeOrg)
	usr, usrOK := limitReset(h, ScopeUser)
	switch {
	case scope == ScopeUser && usrOK:
		return usr, true
	case scope == ScopeOrg && orgOK:
		return org, true
	case orgOK || usrOK:
		return max(org, usr), true
	}
	return 0, false
}
