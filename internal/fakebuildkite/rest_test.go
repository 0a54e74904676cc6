package fakebuildkite

import (
	"crypto/hmac"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/payload"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// vclock is a virtual clock the tests move by hand.
type vclock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *vclock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *vclock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func newFake(t *testing.T) (*Server, *vclock) {
	t.Helper()
	c := &vclock{now: epoch}
	s := New(c.Now)
	t.Cleanup(s.Close)
	return s, c
}

// get makes an authenticated API request and decodes a JSON list.
func get(t *testing.T, s *Server, path string) (*http.Response, []map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, s.API.URL+"/v2/organizations/"+s.Org+"/pipelines/"+s.Pipeline+"/builds"+path, nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []map[string]any
	if resp.StatusCode == http.StatusOK {
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatal(err)
		}
	}
	return resp, out
}

func numbers(bs []map[string]any) []int {
	var out []int
	for _, b := range bs {
		out = append(out, int(b["number"].(float64)))
	}
	return out
}

func TestListFilters(t *testing.T) {
	s, c := newFake(t)
	quick := QuickScript
	s.Seed("r1", "h100", quick, 10*time.Second)                         // 1: finished at epoch-6s
	s.Seed("r2", "h100", quick, 2*time.Second)                          // 2: running
	s.Seed("r3", "mi300", Script{Never: true, BootStart: time.Hour}, 0) // 3: scheduled
	c.Add(3 * time.Second)                                              // 2 finishes at epoch+2s
	cases := []struct {
		query string
		want  []int
	}{
		{"", []int{3, 2, 1}},
		{"?state[]=scheduled", []int{3}},
		{"?state[]=passed&state[]=scheduled", []int{3, 2, 1}},
		{"?state=passed", []int{2, 1}},
		{"?finished_from=" + epoch.Format(time.RFC3339), []int{2}},
		{"?created_from=" + epoch.Add(-5*time.Second).Format(time.RFC3339), []int{3, 2}},
		{"?created_to=" + epoch.Add(-5*time.Second).Format(time.RFC3339), []int{1}},
		{"?meta_data[queue]=h100&state[]=passed", []int{2, 1}},
		{"?meta_data[run_id]=r3", []int{3}},
		{"?meta_data[run_id]=nope", nil},
	}
	for _, tc := range cases {
		resp, bs := get(t, s, tc.query)
		if resp.StatusCode != 200 {
			t.Errorf("%s: status %d", tc.query, resp.StatusCode)
			continue
		}
		if got := numbers(bs); !equal(got, tc.want) {
			t.Errorf("%s: builds %v, want %v", tc.query, got, tc.want)
		}
	}
	if resp, _ := get(t, s, "?finished_from=yesterday"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Errorf("bad time: status %d, want 422", resp.StatusCode)
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestListExcludeJobsAndPages(t *testing.T) {
	s, _ := newFake(t)
	for range 5 {
		s.Seed("r", "h100", QuickScript, 10*time.Second)
	}
	resp, bs := get(t, s, "?per_page=2&exclude_jobs=true")
	if got := numbers(bs); !equal(got, []int{5, 4}) {
		t.Fatalf("page 1: %v", got)
	}
	if _, ok := bs[0]["jobs"]; ok {
		t.Error("exclude_jobs=true still lists jobs")
	}
	link := resp.Header.Get("Link")
	if !strings.Contains(link, "page=2") || !strings.Contains(link, `rel="next"`) {
		t.Fatalf("Link %q names no next page", link)
	}
	resp, bs = get(t, s, "?per_page=2&page=3")
	if got := numbers(bs); !equal(got, []int{1}) || resp.Header.Get("Link") != "" {
		t.Fatalf("last page: %v, Link %q", got, resp.Header.Get("Link"))
	}
	if _, ok := bs[0]["jobs"]; !ok {
		t.Error("without exclude_jobs the jobs are missing")
	}
}

func TestRateLimit(t *testing.T) {
	s, c := newFake(t)
	s.SetRateLimit(3)
	for i := 1; i <= 3; i++ {
		resp, _ := get(t, s, "")
		if resp.StatusCode != 200 || resp.Header.Get("RateLimit-Remaining") != string(rune('0'+3-i)) {
			t.Fatalf("request %d: %d, remaining %q", i, resp.StatusCode, resp.Header.Get("RateLimit-Remaining"))
		}
	}
	c.Add(20 * time.Second)
	resp, _ := get(t, s, "")
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("RateLimit-Reset") != "40" || resp.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("4th request: %d, reset %q remaining %q", resp.StatusCode, resp.Header.Get("RateLimit-Reset"), resp.Header.Get("RateLimit-Remaining"))
	}
	if s.RateLimited() != 1 {
		t.Errorf("RateLimited = %d", s.RateLimited())
	}
	c.Add(40 * time.Second) // a new window
	if resp, _ := get(t, s, ""); resp.StatusCode != 200 || resp.Header.Get("RateLimit-Remaining") != "2" {
		t.Fatalf("new window: %d remaining %q", resp.StatusCode, resp.Header.Get("RateLimit-Remaining"))
	}
	// Sliding max: 4 requests in [0,20s], then 1 at 60s.
	if got := s.MaxRequestsIn(time.Minute); got != 4 {
		t.Errorf("MaxRequestsIn(1m) = %d, want 4", got)
	}
	if got := s.MaxRequestsIn(10 * time.Second); got != 3 {
		t.Errorf("MaxRequestsIn(10s) = %d, want 3", got)
	}
}

// TestUserRateLimit: the per-user limit as rate_limits.md documents it:
// both header sets on every answer, a 429 whose body names the scope, the
// limit, the requests counted and the reset, no Retry-After; another
// user's token has its own budget, the organization's is shared.
func TestUserRateLimit(t *testing.T) {
	s, c := newFake(t)
	s.SetRateLimit(5)
	s.SetUserRateLimit(3)
	s.AddToken("bkua_other", "alice")
	getAs := func(token string) (*http.Response, map[string]any) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, s.API.URL+"/v2/organizations/"+s.Org+"/pipelines/"+s.Pipeline+"/builds", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body map[string]any
		if resp.StatusCode == http.StatusTooManyRequests {
			if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
				t.Fatal(err)
			}
		}
		return resp, body
	}
	for i := 1; i <= 3; i++ {
		resp, _ := getAs(s.Token)
		h := resp.Header
		if resp.StatusCode != 200 || h.Get("RateLimit-User-Remaining") != string(rune('0'+3-i)) || h.Get("RateLimit-User-Limit") != "3" ||
			h.Get("RateLimit-User-Scope") != "rest_user" || h.Get("RateLimit-Scope") != "rest" || h.Get("RateLimit-Remaining") != string(rune('0'+5-i)) {
			t.Fatalf("request %d: %d %v", i, resp.StatusCode, h)
		}
	}
	c.Add(18 * time.Second)
	resp, body := getAs(s.Token)
	if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") != "" || resp.Header.Get("RateLimit-User-Reset") != "42" ||
		resp.Header.Get("RateLimit-User-Warning") == "" || resp.Header.Get("RateLimit-Warning") != "" {
		t.Fatalf("4th request of one user: %d %v", resp.StatusCode, resp.Header)
	}
	if body["scope"] != ScopeUser || body["limit"] != 3.0 || body["current"] != 4.0 || body["reset"] != 42.0 {
		t.Errorf("429 body = %v", body)
	}
	// Another user still has its own 3; the organization has 0 left
	// after its first (4 counted, 5 allowed).
	if resp, _ := getAs("bkua_other"); resp.StatusCode != 200 || resp.Header.Get("RateLimit-User-Remaining") != "2" || resp.Header.Get("RateLimit-Remaining") != "0" {
		t.Fatalf("other user: %d %v", resp.StatusCode, resp.Header)
	}
	resp, body = getAs("bkua_other")
	if resp.StatusCode != http.StatusTooManyRequests || body["scope"] != ScopeOrg || resp.Header.Get("RateLimit-Reset") != "42" {
		t.Fatalf("org exhausted: %d %v %v", resp.StatusCode, body, resp.Header)
	}
	if s.RateLimitedIn(ScopeUser) != 1 || s.RateLimitedIn(ScopeOrg) != 1 || s.RateLimited() != 2 {
		t.Errorf("rejected: user %d org %d", s.RateLimitedIn(ScopeUser), s.RateLimitedIn(ScopeOrg))
	}
	c.Add(42 * time.Second) // both windows end
	if resp, _ := getAs(s.Token); resp.StatusCode != 200 || resp.Header.Get("RateLimit-User-Remaining") != "2" {
		t.Fatalf("new window: %d %v", resp.StatusCode, resp.Header)
	}
	if resp, _ := getAs("bkua_unknown"); resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("RateLimit-User-Remaining") != "" {
		t.Fatalf("unknown token: %d %v", resp.StatusCode, resp.Header)
	}
}

func TestResultInMetaData(t *testing.T) {
	s, c := newFake(t)
	sc := QuickScript
	sc.ResultInMetaData = true
	n := s.Seed("r", "h100", sc, 0)
	_, bs := get(t, s, "")
	if _, ok := bs[0]["meta_data"].(map[string]any)[payload.ResultMetaDataKey]; ok {
		t.Fatal("result in meta-data before the build finished")
	}
	c.Add(5 * time.Second)
	_, bs = get(t, s, "?exclude_jobs=true")
	v, _ := bs[0]["meta_data"].(map[string]any)[payload.ResultMetaDataKey].(string)
	job, got, err := payload.DecodeResultMetaData(v)
	if err != nil || string(got) != DefaultResult || job != jobID(&build{number: n}, true) {
		t.Fatalf("build %d result meta-data: job %q, %q, %v", n, job, got, err)
	}
}

func TestWebhooks(t *testing.T) {
	s, c := newFake(t)
	type hit struct {
		event string
		body  []byte
		sig   string
		token string
	}
	hits := make(chan hit, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hits <- hit{r.Header.Get("X-Buildkite-Event"), b, r.Header.Get("X-Buildkite-Signature"), r.Header.Get("X-Buildkite-Token")}
	}))
	defer recv.Close()
	done := s.Seed("old", "h100", QuickScript, time.Minute) // finished before: never announced
	s.SetWebhook(Webhook{URL: recv.URL, Secret: "whsec", Token: "whtok"})
	n := s.Seed("r", "h100", QuickScript, 0)
	c.Add(5 * time.Second)
	for _, want := range []string{"job.finished", "build.finished"} {
		select {
		case h := <-hits:
			if h.event != want {
				t.Fatalf("event %q, want %q", h.event, want)
			}
			var msg struct {
				Event string
				Build struct{ Number int }
			}
			if err := json.Unmarshal(h.body, &msg); err != nil || msg.Event != want || msg.Build.Number != n {
				t.Fatalf("body %s: %v", h.body, err)
			}
			parts := strings.SplitN(h.sig, ",", 2)
			if len(parts) != 2 {
				t.Fatalf("signature header %q", h.sig)
			}
			wantSig := SignWebhook("whsec", time.Unix(mustAtoi(t, strings.TrimPrefix(parts[0], "timestamp=")), 0), h.body)
			if !hmac.Equal([]byte(h.sig), []byte(wantSig)) || h.token != "whtok" {
				t.Fatalf("signature %q, want %q; token %q", h.sig, wantSig, h.token)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("no %s webhook", want)
		}
	}
	select {
	case h := <-hits:
		t.Fatalf("unexpected webhook %s (build %d finished before SetWebhook)", h.body, done)
	case <-time.After(100 * time.Millisecond):
	}
	if ok, failed := s.WebhooksSent(); ok != 2 || failed != 0 {
		t.Errorf("WebhooksSent = %d, %d", ok, failed)
	}
}

func mustAtoi(t *testing.T, s string) int64 {
	var n int64
	for _, r := range s {
		if r < '0' || r > '9' {
			t.Fatalf("timestamp %q", s)
		}
		n = n*10 + int64(r-'0')
	}
	return n
}
