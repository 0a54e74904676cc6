package dashboard

import (
	"bytes"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/dashboard/dashboardtest"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

const (
	viewTok = "view-token-0123456789"
	amdTok  = "amd-token-0123456789"
)

func testPage(s Scope) Page {
	p := Page{Scope: s, AsOf: t0,
		Queues: []Queue{{Name: "nvidia-h100", Scheduled: 3, Running: 2, WaitP50: 4 * time.Second, WaitP95: 90 * time.Second, Waits: 20, Agents: 4, Idle: 1, Busy: 2, Lost: 1, OldestScheduled: 2 * time.Minute}},
		Nodes: []Node{{Name: "gpu-node-3", Agents: []Agent{
			{Name: "gpu-node-3-gpu0", Queue: "nvidia-h100", GPU: "NVIDIA H100 80GB HBM3", State: "busy", LastJob: t0.Add(-time.Minute), Runs: 10, NoisyRate: 0.1, FaultRate: 0.2,
				Canary: &Canary{State: "drift", Scores: []float64{1000, 1002, 998, 1001, 999, 1000, 1003, 997, 1100, 1101}, Baseline: 1000, Changes: []int{8}, Off: true, Offset: -0.034}},
			{Name: "gpu-node-3-gpu1", Queue: "nvidia-h100", GPU: "NVIDIA H100 80GB HBM3", State: "lost", Note: "Buildkite webhook agent.lost"}}}},
		InFlight:  []Run{{ID: "run-<b>7</b>", Queue: "nvidia-h100", State: "running", Build: 42, URL: "https://buildkite.com/o/p/builds/42", Age: 30 * time.Second}},
		AlertsOff: "alerting is not set up",
	}
	if s.All() {
		p.Budget = &Budget{Limit: 100, Used: 25, OrgRemaining: 150, UserRemaining: []int{40, -1}}
	}
	return p
}

// TestAccess: the view and vendor tokens, sessions that expire, and a
// wrong token.
func TestAccess(t *testing.T) {
	t.Parallel()
	now := t0
	a := NewAccess([]string{viewTok, ""}, []Scope{{Name: "amd", Token: amdTok, Queues: []string{"amd-mi300"}}}, func() time.Time { return now })
	if s, err := a.Token(viewTok); err != nil || !s.All() {
		t.Fatalf("view token: %+v %v", s, err)
	}
	if s, err := a.Token(amdTok); err != nil || s.All() || !s.Sees("amd-mi300") || s.Sees("nvidia-h100") {
		t.Fatalf("vendor token: %+v %v", s, err)
	}
	for _, bad := range []string{"", "nope", viewTok + "x"} {
		if _, err := a.Token(bad); err == nil {
			t.Errorf("token %q granted", bad)
		}
	}
	id, _, err := a.Login(amdTok)
	if err != nil || len(id) != 64 || strings.Contains(id, amdTok) {
		t.Fatalf("session id %q: %v", id, err)
	}
	if s, err := a.Session(id); err != nil || s.Name != "amd" {
		t.Fatalf("session: %+v %v", s, err)
	}
	now = now.Add(SessionTTL)
	if _, err := a.Session(id); err == nil {
		t.Error("a session outlived its TTL")
	}
}

func TestLoadVendorTokens(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"good", `[{"vendor": "amd", "token": "` + amdTok + `", "queues": ["amd-mi300"]}]`, ""},
		{"short token", `[{"vendor": "amd", "token": "short", "queues": ["q"]}]`, "shorter than 16"},
		{"no queue", `[{"vendor": "amd", "token": "` + amdTok + `", "queues": []}]`, "names no queue"},
		{"shared token", `[{"vendor": "a", "token": "` + amdTok + `", "queues": ["q"]}, {"vendor": "b", "token": "` + amdTok + `", "queues": ["r"]}]`, "another entry's"},
		{"unknown field", `[{"vendor": "a", "tokn": "x"}]`, "not a JSON list"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := LoadVendorTokens(strings.NewReader(tc.in))
			if (tc.want == "") != (err == nil) || (err != nil && !errors.Is(err, ErrVendorTokens)) {
				t.Fatalf("error %v, want an ErrVendorTokens saying %q", err, tc.want)
			}
			// The message is the contract: it tells the operator which entry to fix.
			if err != nil && !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestLoginFlow: the form sets an HttpOnly, SameSite=Strict cookie that
// holds a session id, the page is built for the token's scope, a bearer
// header works without a form, and logout ends the session.
func TestLoginFlow(t *testing.T) {
	t.Parallel()
	a := NewAccess([]string{viewTok}, []Scope{{Name: "amd", Token: amdTok, Queues: []string{"amd-mi300"}}}, nil)
	var built []string
	srv := httptest.NewServer(Handler(a, func(s Scope) Page { built = append(built, s.Name); return testPage(s) }))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := http.Get(srv.URL + "/dashboard")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("Content-Security-Policy") == "" {
		t.Fatalf("no credentials: %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
	if resp, _ = noRedirect.PostForm(srv.URL+"/dashboard/login", url.Values{"token": {"wrong"}}); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
		t.Fatalf("wrong token: %d, cookies %v", resp.StatusCode, resp.Cookies())
	}
	resp, err = noRedirect.PostForm(srv.URL+"/dashboard/login", url.Values{"token": {amdTok}})
	if err != nil || resp.StatusCode != http.StatusSeeOther || len(resp.Cookies()) != 1 {
		t.Fatalf("login: %v %v", resp, err)
	}
	c := resp.Cookies()[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/dashboard" || strings.Contains(c.Value, amdTok) {
		t.Fatalf("cookie %+v: want HttpOnly, SameSite=Strict, path /dashboard, no token in it", c)
	}
	get := func(h http.Header, cookie *http.Cookie) int {
		req, _ := http.NewRequest("GET", srv.URL+"/dashboard", nil)
		req.Header = h
		if cookie != nil {
			req.AddCookie(cookie)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(http.Header{}, c); code != 200 {
		t.Fatalf("with the session cookie: %d", code)
	}
	if code := get(http.Header{"Authorization": {"Bearer " + viewTok}}, nil); code != 200 {
		t.Fatalf("with the bearer view token: %d", code)
	}
	if strings.Join(built, ",") != "amd,all" {
		t.Errorf("pages built for %v, want amd then all", built)
	}
	req, _ := http.NewRequest("POST", srv.URL+"/dashboard/logout", nil)
	req.AddCookie(c)
	if resp, err := noRedirect.Do(req); err != nil || resp.StatusCode != http.StatusSeeOther {
		t.Fatalf("logout: %v %v", resp, err)
	}
	if code := get(http.Header{}, c); code != http.StatusUnauthorized {
		t.Errorf("the cookie still works after logout: %d", code)
	}
}

// TestRenderedInChromium: the page, rendered by a real headless Chromium
// from a file (nothing else reachable), shows the queues, agents, runs and
// budget, has no script, and escapes what it shows.
func TestRenderedInChromium(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		scope Scope
		want  []string
		not   []string
	}{
		{"all", Scope{Name: "all"}, []string{`data-queue="nvidia-h100"`, `<td class="n">3</td>`, `wait p95`, `1m30s`, `data-agent="gpu-node-3-gpu1"`, `class="lost"`, `Buildkite webhook agent.lost`, `run-&lt;b&gt;7&lt;/b&gt;`, `id="budget"`, `25 / 100`, `not known yet`, `alerting is not set up`,
			// gpu0's canaries: a sparkline of its 10 points, the baseline, the change at the 9th; gpu1 has none.
			`<svg class="spark" width="120" height="24" role="img" aria-label="10 canaries; change points: 1">`, `<line class="baseline"`, `<line class="change" x1="105.1"`, `<span class="drift">drift</span>`,
			// …and its offset verdict, as the canary_drift alarm gives it.
			`<span class="drift">offset -3.4 %</span>`},
			[]string{"<script", "<b>7</b>"}},
		{"vendor", Scope{Name: "amd", Queues: []string{"amd-mi300"}}, []string{`kbgen fleet · amd`}, []string{`id="budget"`, "<script"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf bytes.Buffer
			if err := Render(&buf, testPage(tc.scope)); err != nil {
				t.Fatal(err)
			}
			dom := dashboardtest.ChromiumDOM(t, buf.Bytes())
			for _, w := range tc.want {
				if !strings.Contains(dom, w) {
					t.Errorf("the rendered page lacks %q", w)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(dom, n) {
					t.Errorf("the rendered page has %q", n)
				}
			}
			if t.Failed() {
				t.Logf("DOM:\n%s", dom)
			}
		})
	}
}
