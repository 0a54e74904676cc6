package client

import (
	"bytes"
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/payload"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// rig is a fake Buildkite on a virtual clock and a client for it.
type rig struct {
	fake   *fakebuildkite.Server
	clock  *FakeClock
	client *Client
	debug  *syncbuf.Buffer
	events []Event
}

// rigAttemptTimeout bounds one response's wait in the rig: long enough
// that a loaded CI machine under -race answers a 200 KiB artifact list in
// time (150 ms did not: TestResultRidesOnMetaData gave up after 6 tries),
// short enough that the slow-poll fault (slowPoll) is abandoned and retried.
const rigAttemptTimeout = time.Second

// slowPoll is the slow-poll fault's delay: past rigAttemptTimeout.
const slowPoll = rigAttemptTimeout + 500*time.Millisecond

func newRig(t testing.TB, sc fakebuildkite.Script) *rig {
	t.Helper()
	clock := NewFakeClock(epoch)
	fake := fakebuildkite.New(clock.Now)
	t.Cleanup(fake.Close)
	fake.SetScript(sc)
	r := &rig{fake: fake, clock: clock, debug: &syncbuf.Buffer{}}
	c, err := New(Options{
		APIURL: fake.URL(), Org: fake.Org, Pipeline: fake.Pipeline, Token: fake.Token,
		Debug: r.debug, Clock: clock, AttemptTimeout: rigAttemptTimeout,
	})
	if err != nil {
		t.Fatal(err)
	}
	r.client = c
	return r
}

func (r *rig) submit(t testing.TB, ctx context.Context, deadline time.Duration) *Outcome {
	t.Helper()
	w := WaitOptions{OnEvent: func(e Event) { r.events = append(r.events, e) }}
	if deadline > 0 {
		w.Deadline = r.clock.Now().Add(deadline)
	}
	return r.client.Submit(ctx, testSubmission(t), w)
}

func testSubmission(t testing.TB) Submission {
	t.Helper()
	enc, err := payload.Encode([]byte(`{"lang":"py","mode":"test","sources":{"eval.py":"","submission.py":""},"main":"eval.py","tests":[{"n":1}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return Submission{Queue: "h100", RunID: "run-42", Encoded: enc, Mode: payload.ModeTest, Branch: "main", Commit: "HEAD", User: "alice"}
}

func mustJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func defaultResultJSON(t testing.TB) string {
	t.Helper()
	res, err := ParseResult([]byte(fakebuildkite.DefaultResult))
	if err != nil {
		t.Fatal(err)
	}
	return mustJSON(t, res)
}

func TestSubmitPasses(t *testing.T) {
	t.Parallel()
	r := newRig(t, fakebuildkite.QuickScript)
	out := r.submit(t, context.Background(), 0)
	if out.Status != Obtained {
		t.Fatalf("status = %v, result %+v", out.Status, out.Result)
	}
	if got, want := mustJSON(t, out.Result), defaultResultJSON(t); got != want {
		t.Errorf("result:\n got %s\nwant %s", got, want)
	}
	env, meta, msg := r.fake.CreatedEnv(out.Build.Number)
	sub := testSubmission(t)
	wantEnv := map[string]string{
		"KERNELBOT_PAYLOAD": sub.Encoded, "KERNELBOT_PAYLOAD_SHA256": payload.Checksum(sub.Encoded),
		"KERNELBOT_RUN_ID": "run-42", "KERNELBOT_QUEUE": "h100", "KERNELBOT_USER": "alice",
	}
	if mustJSON(t, env) != mustJSON(t, wantEnv) {
		t.Errorf("build env = %v\nwant %v", env, wantEnv)
	}
	if mustJSON(t, meta) != `{"queue":"h100","run_id":"run-42"}` {
		t.Errorf("meta-data = %v", meta)
	}
	if msg != "kbgen run-42: test on h100" {
		t.Errorf("message = %q", msg)
	}
	var states []string
	for _, e := range r.events {
		states = append(states, e.Kind+":"+e.Step+":"+e.State)
	}
	if got, want := strings.Join(states, " "), "created:: state::scheduled state::running job:eval:scheduled job:eval:running state::passed job:eval:passed"; got != want {
		t.Errorf("events = %s\nwant     %s", got, want)
	}
	for _, req := range r.fake.Requests() {
		if req.Server == "storage" && req.Header.Get("Authorization") != "" {
			t.Errorf("storage request carried Authorization: %s", req.Path)
		}
	}
	if n := r.fake.CountRequests("", "/download"); n != 1 {
		t.Errorf("%d download requests, want 1", n)
	}
}

func TestSubmitSplitsLargePayload(t *testing.T) {
	t.Parallel()
	r := newRig(t, fakebuildkite.QuickScript)
	sub := testSubmission(t)
	sub.Encoded = strings.Repeat("QUJD", payload.MaxEnvValue/2) // 2 × MaxEnvValue bytes
	out := r.client.Submit(context.Background(), sub, WaitOptions{})
	if out.Status != Obtained {
		t.Fatalf("status %v: %s", out.Status, out.Result.Error)
	}
	env, _, _ := r.fake.CreatedEnv(out.Build.Number)
	if _, ok := env["KERNELBOT_PAYLOAD"]; ok {
		t.Error("a payload over MaxEnvValue went into one env var")
	}
	joined, err := payload.JoinEnv(contract.MapLookup(env))
	if err != nil || joined != sub.Encoded {
		t.Errorf("JoinEnv = %d bytes, %v; want the payload back", len(joined), err)
	}
}

// profileResult is a profile run's result.json as the runner writes it:
// no download_url (only the host knows where the zip is uploaded).
const profileResult = `{"success":true,"error":"","system":{"gpu":"","device_count":1,"cpu":"","runtime":"","platform":"","torch":"","hostname":"n"},"runs":{"profile.0":{"start":"2026-11-24T00:00:00.000000","end":"2026-11-24T00:00:01.000000","compilation":null,"run":null,"profile":{"profiler":"Nsight-Compute","trace":"UEs=","download_url":null}}}}`

// profileURL finds a set download_url in a result's JSON.
var profileURL = regexp.MustCompile(`"https?://[^"]*/download"`)

// TestOutcomes covers every way a build ends, each with the exact result.
func TestOutcomes(t *testing.T) {
	t.Parallel()
	q := fakebuildkite.QuickScript
	with := func(f func(*fakebuildkite.Script)) fakebuildkite.Script { s := q; f(&s); return s }
	failedResult := `{"success": false, "error": "no GPU visible", "system": {"gpu": "", "device_count": 1, "cpu": "", "runtime": "", "platform": "", "torch": "", "hostname": "n"}, "runs": {}}`
	tests := []struct {
		name     string
		script   fakebuildkite.Script
		status   Status
		wantErr  string // the FullResult's error; "" = the default result
		wantJSON string // exact result JSON when set
	}{
		{name: "passes", script: q, status: Obtained},
		{name: "no result.json", script: with(func(s *fakebuildkite.Script) { s.Artifacts = map[string][]byte{"log.txt": []byte("x")} }),
			status: RunnerFailed, wantErr: "build 1 passed but the eval job uploaded no result.json"},
		{name: "truncated result.json", script: with(func(s *fakebuildkite.Script) {
			s.Artifacts = map[string][]byte{"result.json": []byte(fakebuildkite.DefaultResult[:100])}
		}), status: RunnerFailed, wantErr: "build 1: result.json of the eval job is not a valid FullResult: not JSON (unexpected EOF)"},
		{name: "result.json not a FullResult", script: with(func(s *fakebuildkite.Script) { s.Artifacts = map[string][]byte{"result.json": []byte(`{"ok": 1}`)} }),
			status: RunnerFailed, wantErr: `build 1: result.json of the eval job is not a valid FullResult: no boolean "success"`},
		{name: "runner failed", script: with(func(s *fakebuildkite.Script) {
			s.EvalExit = 75
			s.Artifacts = map[string][]byte{"result.json": []byte(failedResult)}
		}), status: RunnerFailed, wantJSON: `{"success":false,"error":"no GPU visible","system":{"gpu":"","device_count":1,"cpu":"","runtime":"","platform":"","torch":"","hostname":"n"},"runs":{}}`},
		{name: "eval failed without result", script: with(func(s *fakebuildkite.Script) { s.EvalExit = 137; s.Artifacts = map[string][]byte{} }),
			status: RunnerFailed, wantErr: "build 1 failed: the eval job failed (exit status 137) without uploading result.json"},
		{name: "bootstrap failed", script: with(func(s *fakebuildkite.Script) { s.BootstrapFails = true }),
			status: RunnerFailed, wantErr: "build 1 failed before the eval step was uploaded (the bootstrap job ended failed (exit status 1)); no result.json"},
		{name: "eval never started", script: with(func(s *fakebuildkite.Script) { s.EvalNeverStarts = true; s.Finish = 30 * time.Second }),
			status: RunnerFailed, wantErr: `build 1 failed: the eval job never started (state expired): no agent on queue "h100" took it; no result.json`},
		{name: "canceled in the UI", script: with(func(s *fakebuildkite.Script) { s.CancelAt = 3 * time.Second }),
			status: RunnerFailed, wantErr: "build 1 was canceled: the eval job canceled without uploading result.json"},
		{name: "canceled before upload", script: with(func(s *fakebuildkite.Script) { s.CancelAt = time.Second }),
			status: RunnerFailed, wantErr: "build 1 was canceled before the eval step was uploaded (the bootstrap job ended canceled); no result.json"},
		{name: "no step key: found by path", script: with(func(s *fakebuildkite.Script) { s.NoStepKey = true }), status: Obtained},
		// Kernelbot's ProfileResult.download_url: the eval job's
		// profile_data/<run>.zip artifact, as the REST list names it.
		{name: "profile run: download_url is its artifact", script: with(func(s *fakebuildkite.Script) {
			s.Artifacts = map[string][]byte{"result.json": []byte(profileResult), "profile_data/profile.0.zip": []byte("PK")}
		}), status: Obtained, wantJSON: strings.Replace(profileResult, `"download_url":null`, `"download_url":"URL"`, 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tt.script)
			out := r.submit(t, context.Background(), 0)
			if out.Status != tt.status {
				t.Errorf("status = %v, want %v (error %q)", out.Status, tt.status, out.Result.Error)
			}
			want := tt.wantJSON
			switch {
			case want != "":
			case tt.wantErr == "":
				want = defaultResultJSON(t)
			default:
				want = mustJSON(t, payload.FullResult{Error: tt.wantErr, System: payload.SystemInfo{DeviceCount: 1}, Runs: map[string]payload.EvalResult{}})
			}
			got := mustJSON(t, out.Result)
			if u := profileURL.FindString(got); u != "" {
				// The fake's URL: the eval job's artifact's download API.
				if !strings.Contains(u, "/builds/1/jobs/0190-eval-1/artifacts/") || !strings.HasSuffix(u, `/download"`) {
					t.Errorf("download_url %s is not the eval job's artifact download URL", u)
				}
				got = strings.Replace(got, u, `"URL"`, 1)
			}
			if got != want {
				t.Errorf("result:\n got %s\nwant %s", got, want)
			}
		})
	}
}

// TestFaults injects API and network faults; each must be survived
// without changing the result.
func TestFaults(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		fault fakebuildkite.Fault
		// minimum requests to the faulted path (the retries happened)
		path string
		min  int
	}{
		{name: "500 on poll", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 500, Times: 2}, path: "/builds/1", min: 3},
		{name: "502 on poll", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 502, Times: 2}, path: "/builds/1", min: 3},
		{name: "503 on artifacts", fault: fakebuildkite.Fault{Method: "GET", Path: "/artifacts?", Status: 503, Times: 3}, path: "/artifacts?", min: 4},
		{name: "503 on download", fault: fakebuildkite.Fault{Method: "GET", Path: "/download", Status: 503, Times: 1}, path: "/download", min: 2},
		{name: "429 Retry-After", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 429, RetryAfter: "7", Times: 1}, path: "/builds/1", min: 2},
		{name: "429 RateLimit-Reset", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 429, RateLimitReset: "12", Times: 2}, path: "/builds/1", min: 3},
		{name: "429 on create", fault: fakebuildkite.Fault{Method: "POST", Path: "/builds", Status: 429, RetryAfter: "1", Times: 1}, path: "/builds", min: 2},
		{name: "reset on poll", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Reset: true, Times: 2}, path: "/builds/1", min: 3},
		{name: "reset on create", fault: fakebuildkite.Fault{Method: "POST", Path: "/builds", Reset: true, Times: 1}, path: "/builds", min: 2},
		{name: "503 on create", fault: fakebuildkite.Fault{Method: "POST", Path: "/builds", Status: 503, Times: 1}, path: "/builds", min: 2},
		// Each poll gives up after 6 tries; Wait rides out five of those.
		{name: "API outage of a minute", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 503, Times: 30}, path: "/builds/1", min: 31},
		{name: "slow poll", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Delay: slowPoll, Times: 1}, path: "/builds/1", min: 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, fakebuildkite.QuickScript)
			r.fake.AddFault(tt.fault)
			out := r.submit(t, context.Background(), 0)
			if out.Status != Obtained {
				t.Fatalf("status = %v: %s\ndebug log:\n%s", out.Status, out.Result.Error, r.debug.String())
			}
			if got, want := mustJSON(t, out.Result), defaultResultJSON(t); got != want {
				t.Errorf("result:\n got %s\nwant %s", got, want)
			}
			if n := r.fake.CountRequests(tt.fault.Method, tt.path); n < tt.min {
				t.Errorf("%d requests to %s, want at least %d (retries)", n, tt.path, tt.min)
			}
			if n := r.fake.CountRequests("POST", "/builds"); n > 1 && out.Build.Number != 1 {
				t.Errorf("a retried create made a second build (#%d)", out.Build.Number)
			}
			if !strings.Contains(r.debug.String(), "retry 1/") {
				t.Errorf("debug log shows no retry:\n%s", r.debug.String())
			}
		})
	}
}

func TestRetryAfterIsObeyed(t *testing.T) {
	t.Parallel()
	r := newRig(t, fakebuildkite.QuickScript)
	r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 429, RetryAfter: "30", Times: 1})
	start := r.clock.Now()
	out := r.submit(t, context.Background(), 0)
	if out.Status != Obtained {
		t.Fatalf("status %v: %s", out.Status, out.Result.Error)
	}
	if waited := r.clock.Now().Sub(start); waited < 30*time.Second {
		t.Errorf("finished %s after start; a Retry-After of 30s was not honoured", waited)
	}
	if !strings.Contains(r.debug.String(), "rate limited (429), waiting 30s as asked") {
		t.Errorf("debug log:\n%s", r.debug.String())
	}
}

// TestUserLimitIsBudgeted: submit against Buildkite's per-user limit
// (rate_limits.md). A user limit of 6 a minute is spent by the fourth
// poll: the client stops at RateLimit-User-Remaining 0 and waits for
// RateLimit-User-Reset instead of earning a 429; and a 429 naming scope
// rest_user waits for the user's reset, not the organization's.
func TestUserLimitIsBudgeted(t *testing.T) {
	t.Run("remaining 0 holds", func(t *testing.T) {
		sc := fakebuildkite.QuickScript
		sc.Finish = 20 * time.Second
		r := newRig(t, sc)
		r.fake.SetRateLimit(200)
		r.fake.SetUserRateLimit(6)
		out := r.submit(t, context.Background(), 0)
		if out.Status != Obtained {
			t.Fatalf("status %v: %s", out.Status, out.Result.Error)
		}
		if n := r.fake.RateLimited(); n != 0 {
			t.Errorf("%d answers 429", n)
		}
		if !strings.Contains(r.debug.String(), "rate limit spent: waiting") {
			t.Errorf("the client never held (the test proves nothing):\n%s", r.debug.String())
		}
	})
	t.Run("429 waits for its scope", func(t *testing.T) {
		r := newRig(t, fakebuildkite.QuickScript)
		r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 429, RateLimitReset: "3", UserRateLimitReset: "40", Scope: fakebuildkite.ScopeUser})
		start := r.clock.Now()
		if out := r.submit(t, context.Background(), 0); out.Status != Obtained {
			t.Fatalf("status %v: %s", out.Status, out.Result.Error)
		}
		if waited := r.clock.Now().Sub(start); waited < 40*time.Second {
			t.Errorf("finished %s after start: the user's reset of 40 s was not waited for", waited)
		}
	})
}

func TestCreateRetryDoesNotDuplicate(t *testing.T) {
	t.Parallel()
	r := newRig(t, fakebuildkite.QuickScript)
	// The create reached the server (build #1 exists) but its answer was
	// lost: simulate by failing the response after creating.
	r.fake.Seed("run-42", "h100", fakebuildkite.QuickScript, 0)
	r.fake.AddFault(fakebuildkite.Fault{Method: "POST", Path: "/builds", Status: 502, Times: 1})
	out := r.submit(t, context.Background(), 0)
	if out.Status != Obtained || out.Build.Number != 1 {
		t.Fatalf("status %v build %+v: %s", out.Status, out.Build, out.Result.Error)
	}
	if n := r.fake.CountRequests("POST", "/builds"); n != 1 {
		t.Errorf("%d create requests; the lookup by run id should have found build 1", n)
	}
}

func TestInfraFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		fault   fakebuildkite.Fault
		token   string
		wantErr string
	}{
		{name: "poll keeps failing", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 503, Times: 100},
			wantErr: "getting build 1: GET /v2/organizations/gpu-mode/pipelines/kernelbot/builds/1: 503 Service Unavailable: Service Unavailable; the build may still be running: `kbgen wait 1` re-attaches"},
		{name: "rate limit past the cap", fault: fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 429, RetryAfter: "3600", Times: 100},
			wantErr: "GET /v2/organizations/gpu-mode/pipelines/kernelbot/builds/1: rate limited (429) and asked to wait 1h0m0s, more than the 1m0s allowed; the build may still be running"},
		{name: "bad token", token: "wrong-token",
			wantErr: "run run-42 on h100: creating build: POST /v2/organizations/gpu-mode/pipelines/kernelbot/builds: 401 Unauthorized: Authentication required. Please supply a valid API Access Token."},
		{name: "artifacts keep failing", fault: fakebuildkite.Fault{Method: "GET", Path: "/artifacts", Status: 500, Times: 100},
			wantErr: "build 1 passed, but its result could not be fetched: listing artifacts of build 1: GET /v2/organizations/gpu-mode/pipelines/kernelbot/builds/1/jobs/0190-eval-1/artifacts: 500 Internal Server Error: Internal Server Error; `kbgen result 1` tries again"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, fakebuildkite.QuickScript)
			if tt.token != "" {
				c, err := New(Options{APIURL: r.fake.URL(), Org: r.fake.Org, Pipeline: r.fake.Pipeline, Token: tt.token, Clock: r.clock})
				if err != nil {
					t.Fatal(err)
				}
				r.client = c
			}
			if tt.fault.Times > 0 {
				r.fake.AddFault(tt.fault)
			}
			out := r.submit(t, context.Background(), 0)
			if out.Status != Infra {
				t.Fatalf("status = %v, want Infra (%s)", out.Status, out.Result.Error)
			}
			if !strings.Contains(out.Result.Error, tt.wantErr) {
				t.Errorf("error = %q\nwant it to contain %q", out.Result.Error, tt.wantErr)
			}
			if out.Result.Success {
				t.Error("success true on an infra failure")
			}
			if tt.fault.RetryAfter != "" {
				if n := r.fake.CountRequests("GET", tt.fault.Path); n != 1 {
					t.Errorf("%d requests; a wait over the cap should give up at once", n)
				}
			}
		})
	}
}

func TestTimeoutCancels(t *testing.T) {
	t.Parallel()
	sc := fakebuildkite.QuickScript
	sc.Never = true
	r := newRig(t, sc)
	out := r.submit(t, context.Background(), 30*time.Second)
	if out.Status != TimedOut {
		t.Fatalf("status = %v (%s)", out.Status, out.Result.Error)
	}
	if want := "timed out after 30s waiting for build 1 (state running); the build was canceled"; out.Result.Error != want {
		t.Errorf("error = %q, want %q", out.Result.Error, want)
	}
	if n := r.fake.CountRequests("PUT", "/builds/1/cancel"); n != 1 {
		t.Errorf("%d cancel requests, want 1", n)
	}
	b, err := r.client.GetBuild(context.Background(), 1)
	if err != nil || b.State != StateCanceled {
		t.Errorf("build after timeout: %+v, %v; want canceled", b, err)
	}
}

// TestTimeoutBoundsEveryPhase: --timeout is the whole submission's, not
// only the wait's. Buildkite unreachable from the start once made submit
// retry its create for 137 s and exit 4; with a 20 s deadline it ends
// timed out (exit 5) within the deadline plus the cleanup allowance.
func TestTimeoutBoundsEveryPhase(t *testing.T) {
	tests := []struct {
		name  string
		setup func(r *rig)
		want  string
	}{
		{"create: Buildkite unreachable", nil, "before run run-42 was created"},
		{"create: every answer 503", func(r *rig) {
			r.fake.AddFault(fakebuildkite.Fault{Path: "/builds", Status: 503, Times: 1000})
		}, "before run run-42 was created"},
		{"wait: every poll 503", func(r *rig) {
			r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "/builds/1", Status: 503, Times: 1000})
		}, "timed out after 20s waiting for build 1"},
		{"result: the artifact list 503", func(r *rig) {
			r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "/artifacts", Status: 503, Times: 1000})
		}, "fetching the result of build 1 (passed)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := fakebuildkite.QuickScript
			sc.Finish = 19 * time.Second
			r := newRig(t, sc)
			if tt.setup == nil {
				c, err := New(Options{APIURL: "http://127.0.0.1:1/", Org: "o", Pipeline: "p", Token: "tok", Clock: r.clock})
				if err != nil {
					t.Fatal(err)
				}
				r.client = c
			} else {
				tt.setup(r)
			}
			start := r.clock.Now()
			out := r.submit(t, context.Background(), 20*time.Second)
			took := r.clock.Now().Sub(start)
			if out.Status != TimedOut || out.Status.ExitCode() != 5 {
				t.Fatalf("status %v (exit %d): %s", out.Status, out.Status.ExitCode(), out.Result.Error)
			}
			if took < 20*time.Second || took > 20*time.Second+cleanupTime {
				t.Errorf("ended %s after the start; want 20 s to 20 s + %s", took, cleanupTime)
			}
			if !strings.Contains(out.Result.Error, tt.want) {
				t.Errorf("error %q does not say %q", out.Result.Error, tt.want)
			}
		})
	}
}

// TestCancel422: Buildkite answers 422 to a cancel it will not do
// (builds.md: only scheduled, running or failing builds are canceled). A
// 422 for a build that then shows finished is done; for one that goes on
// it is a failure, never "the build was canceled".
func TestCancel422(t *testing.T) {
	tests := []struct {
		name   string
		finish bool // the build is finished when the cancel comes
		want   string
	}{
		{"build goes on", false, "canceling it failed: canceling build 1: PUT /v2/organizations/gpu-mode/pipelines/kernelbot/builds/1/cancel: 422 Unprocessable Entity: Unprocessable Entity, and it goes on (state running)"},
		{"build already finished", true, "the build was canceled"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := fakebuildkite.QuickScript
			sc.Never = !tt.finish
			r := newRig(t, sc)
			if tt.finish {
				r.clock.Advance(time.Minute)
				if err := r.client.CancelBuild(context.Background(), r.fake.Seed("x", "h100", sc, time.Minute)); err != nil {
					t.Fatalf("cancel of a finished build: %v", err)
				}
				return
			}
			r.fake.AddFault(fakebuildkite.Fault{Method: "PUT", Path: "/cancel", Status: 422})
			out := r.submit(t, context.Background(), 30*time.Second)
			if out.Status != TimedOut || !strings.Contains(out.Result.Error, tt.want) {
				t.Fatalf("status %v: %s\nwant it to say %q", out.Status, out.Result.Error, tt.want)
			}
			for _, e := range r.events {
				if e.Kind == "canceled" {
					t.Errorf("a canceled event for a build that goes on")
				}
			}
		})
	}
}

// TestBlockedIsAFlag: a blocked build keeps its last state and says so in
// "blocked" (builds.md); it waits on a person, so kbgen takes it as
// finished.
func TestBlockedIsAFlag(t *testing.T) {
	t.Parallel()
	for _, b := range []Build{{State: StateRunning, Blocked: true}, {State: StatePassed, Blocked: true}, {State: StatePassed}} {
		if !b.Finished() {
			t.Errorf("%+v is not finished", b)
		}
	}
	if b := (Build{State: StateRunning}); b.Finished() {
		t.Error("a running build is finished")
	}
}

// TestListsExcludePipeline: every builds-list request leaves the expanded
// pipeline out (builds.md: exclude_pipeline=true).
func TestListsExcludePipeline(t *testing.T) {
	r := newRig(t, fakebuildkite.QuickScript)
	ctx := context.Background()
	_, _, _ = r.client.FilterBuilds(ctx, ListFilter{})
	_, _ = r.client.ListBuilds(ctx, nil, 1)
	_, _ = r.client.FindBuild(ctx, "x")
	n := 0
	for _, q := range r.fake.Requests() {
		if q.Method == "GET" && strings.HasSuffix(strings.SplitN(q.Path, "?", 2)[0], "/builds") {
			n++
			if !strings.Contains(q.Path, "exclude_pipeline=true") {
				t.Errorf("list without exclude_pipeline: %s", q.Path)
			}
		}
	}
	if n != 3 {
		t.Errorf("%d list requests, want 3", n)
	}
}

func TestInterruptCancels(t *testing.T) {
	t.Parallel()
	sc := fakebuildkite.QuickScript
	sc.Never = true
	r := newRig(t, sc)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	w := WaitOptions{OnEvent: func(e Event) {
		if e.Kind == "job" && e.State == "running" {
			cancel(errSignal)
		}
	}}
	out := r.client.Submit(ctx, testSubmission(t), w)
	if out.Status != TimedOut {
		t.Fatalf("status = %v (%s)", out.Status, out.Result.Error)
	}
	if want := "interrupted (got SIGTERM) waiting for build 1 (state running); the build was canceled"; out.Result.Error != want {
		t.Errorf("error = %q, want %q", out.Result.Error, want)
	}
	if n := r.fake.CountRequests("PUT", "/cancel"); n != 1 {
		t.Errorf("%d cancel requests, want 1", n)
	}
}

var errSignal = errorString("got SIGTERM")

type errorString string

func (e errorString) Error() string { return string(e) }

func TestFetchAndAttach(t *testing.T) {
	t.Parallel()
	r := newRig(t, fakebuildkite.QuickScript)
	n := r.fake.Seed("old-run", "h100", fakebuildkite.QuickScript, 0)
	out := r.client.Fetch(context.Background(), n)
	if out.Status != TimedOut || out.Result.Error != "build 1 has not finished (state scheduled); `kbgen wait 1` waits for it" {
		t.Errorf("Fetch of a running build: %v %q", out.Status, out.Result.Error)
	}
	out = r.client.Attach(context.Background(), n, WaitOptions{})
	if out.Status != Obtained {
		t.Fatalf("Attach: %v %s", out.Status, out.Result.Error)
	}
	out = r.client.Fetch(context.Background(), n)
	if out.Status != Obtained || mustJSON(t, out.Result) != defaultResultJSON(t) {
		t.Errorf("Fetch after the build passed: %v %s", out.Status, out.Result.Error)
	}
	if out := r.client.Fetch(context.Background(), 99); out.Status != Infra || !strings.Contains(out.Result.Error, "404 Not Found: No build found") {
		t.Errorf("Fetch of a missing build: %v %q", out.Status, out.Result.Error)
	}
	// `kbgen wait 99`: a build that does not exist is not "still running".
	out = r.client.Attach(context.Background(), 99, WaitOptions{})
	if out.Status != Infra || strings.Contains(out.Result.Error, "still be running") || !strings.Contains(out.Result.Error, "build 99 was not found") {
		t.Errorf("Attach to a missing build: %v %q", out.Status, out.Result.Error)
	}
}

// TestTokenNeverLeaks runs passing, failing and faulted builds with debug
// logging on and looks for the token everywhere it could show.
func TestTokenNeverLeaks(t *testing.T) {
	t.Parallel()
	for _, fault := range []fakebuildkite.Fault{
		{},
		{Method: "GET", Path: "/builds/1", Status: 503, Times: 100},
		{Method: "GET", Path: "/download", Reset: true, Times: 100},
	} {
		r := newRig(t, fakebuildkite.QuickScript)
		if fault.Times > 0 {
			r.fake.AddFault(fault)
		}
		out := r.submit(t, context.Background(), 0)
		var seen bytes.Buffer
		seen.WriteString(r.debug.String())
		seen.WriteString(mustJSON(t, out.Result))
		seen.WriteString(mustJSON(t, r.events))
		tok := r.fake.Token
		if strings.Contains(seen.String(), tok) || strings.Contains(seen.String(), tok[5:]) {
			t.Errorf("token found in output:\n%s", seen.String())
		}
		apiAuth := 0
		for _, req := range r.fake.Requests() {
			switch req.Server {
			case "storage":
				if strings.Contains(mustJSON(t, req), tok) {
					t.Errorf("token reached the storage host: %+v", req)
				}
			case "api":
				if req.Header.Get("Authorization") == "Bearer "+tok {
					apiAuth++
				}
			}
		}
		if apiAuth == 0 {
			t.Error("no API request carried the token: the check above proves nothing")
		}
		if strings.Contains(r.debug.String(), "X-Amz-Signature") {
			t.Errorf("the signed storage URL was logged:\n%s", r.debug.String())
		}
		if !strings.Contains(r.debug.String(), "debug: api GET ") {
			t.Errorf("debug log is empty: %q", r.debug.String())
		}
	}
}

func TestRedactsTokenInErrors(t *testing.T) {
	t.Parallel()
	c, err := New(Options{APIURL: "http://127.0.0.1:1/", Org: "o", Pipeline: "p", Token: "tok-123", Clock: NewFakeClock(epoch), Retry: Retry{Attempts: 1}})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.scrub(errorString("GET /x?token=tok-123: boom")).Error(); got != "GET /x?token=[REDACTED]: boom" {
		t.Errorf("scrub = %q", got)
	}
}

func TestNewRejects(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		opts Options
		want string
	}{
		{Options{Org: "o"}, "no Buildkite API token"},
		{Options{Token: "t"}, "no Buildkite organization"},
		{Options{Token: "t", Org: "o", APIURL: "ftp://x"}, `API URL "ftp://x/" is not an http(s) URL`},
	} {
		// The message is what the CLI prints (exit 2): the text is the contract.
		if _, err := New(tt.opts); err == nil || err.Error() != tt.want {
			t.Errorf("New(%+v) = %v, want %q", tt.opts, err, tt.want)
		}
	}
}
