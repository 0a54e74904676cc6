package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/dashboard"
	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
)

// fastScript is a build that passes 600 ms after its creation.
var fastScript = fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 150 * time.Millisecond, EvalStart: 200 * time.Millisecond, Finish: 600 * time.Millisecond}

const testToken = "kbgen-server-token-123"

type rig struct {
	t      *testing.T
	fake   *fakebuildkite.Server
	svc    *Service
	http   *httptest.Server
	log    *syncbuf.Buffer
	cancel context.CancelFunc
}

type rigOpts struct {
	budget    int
	perUser   int      // 0: budget
	tokens    []string // rotated; each must be a token of the stand-in
	pollEvery time.Duration
	secret    string
	script    fakebuildkite.Script
	fake      *fakebuildkite.Server // reuse (a restart)
	limits    Limits                // zero: DefaultLimits
	orphan    time.Duration         // Config.OrphanGrace
	heartbeat time.Duration         // Config.Heartbeat
	name      string                // Config.Name
	queueTTL  time.Duration         // Config.QueueTTL
	bootstrap string                // Config.BootstrapQueue
	keep      Config                // its SpillDir and Result* bounds are used
	view      string                // Config.ViewToken
	store     *fleetstore.Store     // Config.Store
	vendors   []dashboard.Scope     // Config.VendorTokens
	alerts    *alert.Config         // Config.Alerts, evaluated every 20 ms
	now       func() time.Time      // Config.Now; nil: time.Now
	canary    CanaryConfig          // Config.Canary
}

func newRig(t *testing.T, o rigOpts) *rig {
	t.Helper()
	fake := o.fake
	if fake == nil {
		fake = fakebuildkite.New(nil)
		t.Cleanup(fake.Close)
		if o.script.Finish == 0 && !o.script.Never {
			o.script = fastScript
		}
		fake.SetScript(o.script)
	}
	if o.budget == 0 {
		o.budget = 6000
	}
	if o.pollEvery == 0 {
		o.pollEvery = 50 * time.Millisecond
	}
	log := &syncbuf.Buffer{}
	budget := NewBudget(o.budget)
	if o.perUser > 0 || len(o.tokens) > 0 {
		budget = NewUserBudget(o.budget, max(o.perUser, o.budget), o.tokens)
	}
	c, err := client.New(client.Options{APIURL: fake.URL(), Org: fake.Org, Pipeline: fake.Pipeline, Token: fake.Token,
		Debug: log, WrapAPI: budget.Transport, Retry: client.Retry{Attempts: 3, BaseDelay: 20 * time.Millisecond, MaxDelay: 100 * time.Millisecond, MaxRateLimitWait: 5 * time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Client: c, Budget: budget, PollEvery: o.pollEvery, WebhookSecret: o.secret, Log: log, Registry: reg,
		OrphanGrace: o.orphan, Heartbeat: o.heartbeat, Name: o.name, QueueTTL: o.queueTTL, BootstrapQueue: o.bootstrap, ViewToken: o.view, Store: o.store, VendorTokens: o.vendors, Alerts: o.alerts, AlertEvery: 20 * time.Millisecond, Now: o.now, Canary: o.canary,
		SpillDir: o.keep.SpillDir, ResultMemory: o.keep.ResultMemory, ResultInMemoryMax: o.keep.ResultInMemoryMax, ResultDisk: o.keep.ResultDisk})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := svc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	// The real server: timeouts, connection caps, the webhook bound.
	hs := httptest.NewUnstartedServer(nil)
	hs.Config = svc.HTTPServer(testToken, o.limits)
	hs.Listener = o.limits.Listener(hs.Listener)
	hs.Start()
	r := &rig{t: t, fake: fake, svc: svc, http: hs, log: log, cancel: cancel}
	t.Cleanup(func() { hs.Close(); cancel() })
	return r
}

func testPayload(t *testing.T) string {
	t.Helper()
	enc, err := payload.Encode([]byte(`{"lang": "py", "mode": "test", "sources": {"eval.py": "print(1)", "submission.py": "x = 1"}, "main": "eval.py", "tests": [{"size": 128, "seed": 5236}], "benchmarks": [], "seed": null, "ranking_by": "last", "test_timeout": 60, "benchmark_timeout": 60, "ranked_timeout": 60}`))
	if err != nil {
		t.Fatal(err)
	}
	return enc
}

func (r *rig) do(method, path string, body any, token string) (*http.Response, []byte) {
	r.t.Helper()
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req, _ := http.NewRequest(method, r.http.URL+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return resp, buf.Bytes()
}

func (r *rig) submit(id string) RunStatus {
	r.t.Helper()
	resp, body := r.do("POST", "/v1/runs", RunRequest{RunID: id, Queue: "nvidia-h100", Payload: testPayload(r.t)}, testToken)
	if resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK {
		r.t.Fatalf("POST %s: %d %s", id, resp.StatusCode, body)
	}
	var st RunStatus
	_ = json.Unmarshal(body, &st)
	return st
}

// events reads the whole event stream of a done run.
func (r *rig) events(id string) []client.Event {
	r.t.Helper()
	_, body := r.do("GET", "/v1/runs/"+id+"/events", nil, testToken)
	var evs []client.Event
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var e client.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			r.t.Fatalf("event line %q: %v", line, err)
		}
		evs = append(evs, e)
	}
	return evs
}

// canceledEvent is the reason the run's canceled event gives, "" if none.
func (r *rig) canceledEvent(id string) string {
	r.t.Helper()
	for _, e := range r.events(id) {
		if e.Kind == "canceled" {
			return e.Error
		}
	}
	return ""
}

// await polls GET /v1/runs/{id} until done.
func (r *rig) await(id string, within time.Duration) RunStatus {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		resp, body := r.do("GET", "/v1/runs/"+id, nil, testToken)
		var st RunStatus
		if resp.StatusCode == 200 && json.Unmarshal(body, &st) == nil && st.State == StateDone {
			return st
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("run %s not done within %s; log:\n%s", id, within, r.log.String())
	return RunStatus{}
}

func TestRunsEndToEnd(t *testing.T) {
	r := newRig(t, rigOpts{})
	for i := range 5 {
		r.submit(fmt.Sprintf("run-%d", i))
	}
	for i := range 5 {
		st := r.await(fmt.Sprintf("run-%d", i), 10*time.Second)
		if st.Status != StatusObtained || st.Result == nil || !st.Result.Success || st.Build == 0 || st.BuildState != "passed" {
			t.Fatalf("run-%d: %+v", i, st)
		}
	}
	if n := r.fake.CountRequests("POST", "/builds"); n != 5 {
		t.Errorf("%d creates for 5 runs", n)
	}
}

func TestIdempotentPost(t *testing.T) {
	r := newRig(t, rigOpts{})
	first := r.submit("same")
	resp, body := r.do("POST", "/v1/runs", RunRequest{RunID: "same", Queue: "nvidia-h100", Payload: testPayload(t)}, testToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("second POST: %d %s", resp.StatusCode, body)
	}
	r.await("same", 10*time.Second)
	if n := r.fake.CountRequests("POST", "/builds"); n != 1 {
		t.Fatalf("%d builds created for one run id (first answer %+v)", n, first)
	}
	other, _ := payload.Encode([]byte(`{"lang": "py", "mode": "test", "sources": {"eval.py": "print(2)"}, "main": "eval.py", "tests": [{"size": 1}]}`))
	resp, body = r.do("POST", "/v1/runs", RunRequest{RunID: "same", Queue: "nvidia-h100", Payload: other}, testToken)
	if resp.StatusCode != http.StatusConflict {
		t.Fatalf("same id, other payload: %d %s", resp.StatusCode, body)
	}
}

func TestAuth(t *testing.T) {
	r := newRig(t, rigOpts{})
	for _, tok := range []string{"", "wrong", testToken + "x"} {
		if resp, _ := r.do("GET", "/v1/runs/x", nil, tok); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("token %q: %d, want 401", tok, resp.StatusCode)
		}
		if resp, _ := r.do("POST", "/v1/runs", RunRequest{RunID: "a"}, tok); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("POST with token %q: %d, want 401", tok, resp.StatusCode)
		}
	}
	if resp, body := r.do("GET", "/", nil, ""); resp.StatusCode != 200 || !strings.Contains(string(body), `"ok":true`) {
		t.Errorf("health: %d %s", resp.StatusCode, body)
	}
	if resp, _ := r.do("GET", "/v1/runs/nope", nil, testToken); resp.StatusCode != http.StatusNotFound {
		t.Errorf("unknown run: %d", resp.StatusCode)
	}
}

func TestBadRequests(t *testing.T) {
	r := newRig(t, rigOpts{})
	for name, req := range map[string]RunRequest{
		"no run id":   {Queue: "q", Payload: testPayload(t)},
		"no queue":    {RunID: "a", Payload: testPayload(t)},
		"bad payload": {RunID: "a", Queue: "h100", Payload: "not base64!"},
		"space in id": {RunID: "a b", Queue: "q", Payload: testPayload(t)},
		"bad queue":   {RunID: "a", Queue: "no-such-gpu", Payload: testPayload(t)},
	} {
		if resp, body := r.do("POST", "/v1/runs", req, testToken); resp.StatusCode != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s", name, resp.StatusCode, body)
		}
	}
}

// TestEventsStream reads the progress stream: the same events as kbgen
// submit --progress=json, ending with done; a reader that leaves does not
// stop the run.
func TestEventsStream(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.submit("ev")
	resp, body := r.do("GET", "/v1/runs/ev/events", nil, testToken)
	if resp.StatusCode != 200 {
		t.Fatalf("events: %d", resp.StatusCode)
	}
	var kinds []string
	for _, line := range strings.Split(strings.TrimSpace(string(body)), "\n") {
		var e client.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		kinds = append(kinds, e.Kind+":"+e.State)
		if e.RunID != "ev" || e.Build == 0 {
			t.Errorf("event %+v lacks run id or build", e)
		}
	}
	got := strings.Join(kinds, " ")
	if !strings.HasPrefix(got, "created:") || !strings.HasSuffix(got, "state:passed job:passed done:passed") {
		t.Errorf("events %s", got)
	}
	// Replay from an offset.
	_, body = r.do("GET", "/v1/runs/ev/events?from=1", nil, testToken)
	if n := strings.Count(string(body), "\n"); n != len(kinds)-1 {
		t.Errorf("from=1 gave %d events, want %d", n, len(kinds)-1)
	}
}

func TestClientDisconnectAndDelete(t *testing.T) {
	r := newRig(t, rigOpts{script: fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Finish: 1500 * time.Millisecond}})
	r.submit("gone")
	r.submit("stop")
	// A reader that hangs up after the first event.
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", r.http.URL+"/v1/runs/gone/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 10)
	_, _ = resp.Body.Read(buf)
	cancel()
	resp.Body.Close()
	// Wait for the build of "stop" to exist, then cancel it.
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, body := r.do("GET", "/v1/runs/stop", nil, testToken)
		var st RunStatus
		_ = json.Unmarshal(body, &st)
		if st.Build != 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no build for run stop")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if resp, body := r.do("DELETE", "/v1/runs/stop", nil, testToken); resp.StatusCode != 200 {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	st := r.await("stop", 5*time.Second)
	if st.Status != StatusTimedOut || !strings.Contains(st.Result.Error, "build 2 was canceled") {
		t.Fatalf("canceled run: %+v %+v", st, st.Result)
	}
	if why := r.canceledEvent("stop"); why != "canceled by the client" {
		t.Errorf("canceled event says %q", why)
	}
	if n := r.fake.CountRequests("PUT", "/cancel"); n != 1 {
		t.Errorf("%d cancel requests", n)
	}
	if st := r.await("gone", 5*time.Second); st.Status != StatusObtained {
		t.Fatalf("run whose reader left: %+v", st)
	}
}

func TestQueueAlias(t *testing.T) {
	r := newRig(t, rigOpts{})
	resp, body := r.do("POST", "/v1/runs", RunRequest{RunID: "alias", Queue: "h100", Payload: testPayload(t)}, testToken)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	st := r.await("alias", 10*time.Second)
	env, meta, _ := r.fake.CreatedEnv(st.Build)
	if env["KERNELBOT_QUEUE"] != "nvidia-h100" || meta["queue"] != "nvidia-h100" || meta[MetaDataService] != "kbgen" {
		t.Fatalf("env %v meta %v", env["KERNELBOT_QUEUE"], meta)
	}
}

// TestJobEvents: the progress request carries jobs, so the stream has the
// eval job's state as submit --progress=json does.
func TestJobEvents(t *testing.T) {
	r := newRig(t, rigOpts{script: fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Finish: 2 * time.Second}})
	r.submit("jobs")
	_, body := r.do("GET", "/v1/runs/jobs/events", nil, testToken)
	if !strings.Contains(string(body), `"event":"job","build":1,"run_id":"jobs","step":"eval","state":"running"`) {
		t.Fatalf("no eval running event:\n%s", body)
	}
}
