package serve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

// TestPollFaults: 5xx, 429 and dropped connections on the list request
// delay detection but lose no run.
func TestPollFaults(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "finished_from", Status: 502, Times: 3})
	r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "finished_from", Status: 429, RetryAfter: "0", Times: 2})
	r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "finished_from", Reset: true, Times: 2})
	r.submit("f1")
	r.submit("f2")
	for _, id := range []string{"f1", "f2"} {
		if st := r.await(id, 10*time.Second); st.Status != StatusObtained {
			t.Fatalf("%s: %+v", id, st)
		}
	}
}

// TestResultFromMetaData: a build that carries its result costs its create
// and polls only; without it the artifact is read.
func TestResultFromMetaData(t *testing.T) {
	sc := fastScript
	sc.ResultInMetaData = true
	r := newRig(t, rigOpts{script: sc})
	r.submit("m1")
	if st := r.await("m1", 10*time.Second); st.Status != StatusObtained || st.Result.System.GPU == "" {
		t.Fatalf("m1: %+v", st)
	}
	if n := r.fake.CountRequests("", "/artifacts"); n != 0 {
		t.Errorf("%d artifact requests for a build carrying its result", n)
	}
	r.fake.SetScript(fastScript)
	r.submit("m2")
	r.await("m2", 10*time.Second)
	if n := r.fake.CountRequests("", "/artifacts"); n != 2 { // the list and the download
		t.Errorf("%d artifact requests for a build without meta-data result, want 2", n)
	}
	// A profile run's download_url is known only from the job's artifact
	// list (Kernelbot's ProfileResult.download_url: the profile artifact,
	// not the build page), so its result is read as kbgen submit reads it.
	profile := `{"success":true,"error":"","system":{"gpu":"H100","device_count":1,"cpu":"","runtime":"","platform":"","torch":"","hostname":"n"},"runs":{"profile.0":{"start":"2026-11-24T00:00:00","end":"2026-11-24T00:00:01","compilation":null,"run":null,"profile":{"profiler":"Nsight-Compute","trace":"UEs=","download_url":null}}}}`
	sc.Artifacts = map[string][]byte{"result.json": []byte(profile), "profile_data/profile.0.zip": []byte("PK")}
	r.fake.SetScript(sc)
	r.submit("m3")
	st := r.await("m3", 10*time.Second)
	run := st.Result.Runs["profile.0"]
	if st.Status != StatusObtained || run.Profile == nil || run.Profile.DownloadURL == nil {
		t.Fatalf("m3: %+v, profile %+v", st, run.Profile)
	}
	if u := *run.Profile.DownloadURL; !strings.Contains(u, "/jobs/") || !strings.Contains(u, "/artifacts/") || !strings.HasSuffix(u, "/download") {
		t.Errorf("profile download_url = %q, want the eval job's profile artifact", u)
	}
	// The result itself rides on the meta-data: only the list is read.
	if n := r.fake.CountRequests("", "/artifacts"); n != 3 {
		t.Errorf("%d artifact requests after a profile run, want 3 (its list, not result.json)", n)
	}
}

// TestRetriedResultNeverStale: meta-data is per build and last write wins
// (build_meta_data.md), so after a noise retry (exit 75) it may hold the
// first attempt's result. The service uses it only when it is stamped with
// the latest eval job; else it reads that job's artifact, as kbgen submit
// does, and the two report the same outcome. Issue 18's case: the retry's
// agent is lost, and the stale first result must not be reported.
func TestRetriedResultNeverStale(t *testing.T) {
	stale := strings.Replace(fakebuildkite.DefaultResult, `"hostname": "gpu-node-3"`, `"hostname": "stale-first-attempt"`, 1)
	tests := []struct {
		name      string
		lost      bool
		status    string
		want      string // in the result's error, or its hostname
		artifacts int    // artifact requests the service makes
	}{
		{"retry lost", true, StatusRunnerFailed, "the eval job failed (exit status -1) without uploading result.json", 1},
		{"retry passes", false, StatusObtained, "gpu-node-3", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sc := fastScript
			sc.Finish = 900 * time.Millisecond
			sc.ResultInMetaData, sc.RetryExit, sc.FirstResult, sc.RetryLost = true, 75, []byte(stale), tt.lost
			r := newRig(t, rigOpts{script: sc})
			r.submit("n1")
			st := r.await("n1", 10*time.Second)
			got := st.Result.Error + st.Result.System.Hostname
			if st.Status != tt.status || !strings.Contains(got, tt.want) || strings.Contains(got, "stale") {
				t.Fatalf("service: %s %q, want %s %q", st.Status, got, tt.status, tt.want)
			}
			if n := r.fake.CountRequests("", "/artifacts"); n != tt.artifacts {
				t.Errorf("%d artifact requests, want %d", n, tt.artifacts)
			}
			direct := r.svc.cfg.Client.Fetch(context.Background(), st.Build)
			if statusNames[direct.Status] != st.Status || direct.Result.Error != st.Result.Error || direct.Result.System != st.Result.System {
				t.Errorf("kbgen submit would report %s %q, the service %s %q", statusNames[direct.Status], direct.Result.Error, st.Status, st.Result.Error)
			}
		})
	}
}

// TestRunnerFailedAndNoResult: a build that fails without result.json ends
// runner_failed with the reason.
func TestRunnerFailedAndNoResult(t *testing.T) {
	sc := fastScript
	sc.EvalExit = 1
	sc.Artifacts = map[string][]byte{}
	r := newRig(t, rigOpts{script: sc})
	r.submit("bad")
	st := r.await("bad", 10*time.Second)
	if st.Status != StatusRunnerFailed || !strings.Contains(st.Result.Error, "without uploading result.json") {
		t.Fatalf("%+v %+v", st, st.Result)
	}
}

func TestTimeout(t *testing.T) {
	r := newRig(t, rigOpts{script: fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Never: true}})
	resp, body := r.do("POST", "/v1/runs", RunRequest{RunID: "slow", Queue: "nvidia-h100", Payload: testPayload(t), TimeoutSeconds: 0.3}, testToken)
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("%d %s", resp.StatusCode, body)
	}
	st := r.await("slow", 5*time.Second)
	if st.Status != StatusTimedOut || !strings.Contains(st.Result.Error, "build 1 was canceled") || !strings.Contains(st.Result.Error, "its deadline: ") {
		t.Fatalf("%+v %+v", st, st.Result)
	}
	if why := r.canceledEvent("slow"); !strings.HasPrefix(why, "timed out after 300ms") {
		t.Errorf("canceled event says %q", why)
	}
}

// postHook sends a webhook body with the given headers.
func (r *rig) postHook(body []byte, h map[string]string) int {
	r.t.Helper()
	req, _ := http.NewRequest("POST", r.http.URL+"/v1/buildkite/webhook", bytes.NewReader(body))
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// TestWebhooks: with the stand-in's signed webhooks and a slow safety
// poll, detection follows the webhook; forged, stale, duplicate,
// out-of-order and unknown-build webhooks change nothing.
func TestWebhooks(t *testing.T) {
	const secret = "whsec-123"
	r := newRig(t, rigOpts{pollEvery: time.Hour, secret: secret})
	r.fake.SetWebhook(fakebuildkite.Webhook{URL: r.http.URL + "/v1/buildkite/webhook", Secret: secret, Duplicate: true})
	start := time.Now()
	r.submit("w1")
	st := r.await("w1", 10*time.Second)
	if st.Status != StatusObtained {
		t.Fatalf("%+v", st)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("detection took %s with webhooks and an hourly poll", took)
	}
	// job.finished and build.finished, each twice; the run may be done
	// after the first.
	for wait := time.Now().Add(3 * time.Second); time.Now().Before(wait); time.Sleep(20 * time.Millisecond) {
		if ok, _ := r.fake.WebhooksSent(); ok >= 4 {
			break
		}
	}
	if ok, failed := r.fake.WebhooksSent(); ok != 4 || failed != 0 {
		t.Errorf("webhooks sent %d, failed %d; want 4, 0", ok, failed)
	}

	// A forged signature, a stale one, no auth at all: 401.
	body, _ := r.fake.WebhookBody("build.finished", st.Build)
	now := time.Now()
	for name, h := range map[string]map[string]string{
		"forged":  {"X-Buildkite-Signature": fakebuildkite.SignWebhook("not-the-secret", now, body)},
		"stale":   {"X-Buildkite-Signature": fakebuildkite.SignWebhook(secret, now.Add(-10*time.Minute), body)},
		"garbage": {"X-Buildkite-Signature": "timestamp=x,signature=zz"},
		"token":   {"X-Buildkite-Token": secret},
		"none":    {},
	} {
		if code := r.postHook(body, h); code != http.StatusUnauthorized {
			t.Errorf("%s webhook: %d, want 401", name, code)
		}
	}
	// A valid webhook for an unknown build, and out-of-order ones for a
	// done run: accepted, and nothing changes.
	polls := r.fake.CountRequests("GET", "finished_from")
	unknown := []byte(`{"event":"build.finished","build":{"number":9999,"meta_data":{"run_id":"nope"}}}`)
	if code := r.postHook(unknown, map[string]string{"X-Buildkite-Signature": fakebuildkite.SignWebhook(secret, now, unknown)}); code != 200 {
		t.Errorf("unknown build webhook: %d", code)
	}
	running, _ := r.fake.WebhookBody("build.running", st.Build)
	for _, b := range [][]byte{body, running, body} {
		if code := r.postHook(b, map[string]string{"X-Buildkite-Signature": fakebuildkite.SignWebhook(secret, now, b)}); code != 200 {
			t.Errorf("replayed webhook: %d", code)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if got := r.fake.CountRequests("GET", "finished_from"); got != polls {
		t.Errorf("webhooks for an unknown or done build made %d polls", got-polls)
	}
	if again := r.await("w1", time.Second); again.Status != st.Status || again.BuildState != "passed" {
		t.Errorf("run changed after replayed webhooks: %+v", again)
	}
}

// TestRestartResumes: a service stopped mid-run (its memory gone) and a
// new one on the same pipeline: the new one finds the build by meta-data,
// reports its result, and a re-POST of the run id attaches to it instead of
// creating a second build.
func TestRestartResumes(t *testing.T) {
	slow := fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Finish: 1500 * time.Millisecond}
	first := newRig(t, rigOpts{script: slow})
	first.submit("r1")
	deadline := time.Now().Add(5 * time.Second)
	for first.fake.CountRequests("POST", "/builds") == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	first.cancel()
	first.http.Close()

	second := newRig(t, rigOpts{fake: first.fake})
	if resp, _ := second.do("GET", "/v1/runs/r1", nil, testToken); resp.StatusCode != 200 {
		t.Fatalf("restarted service does not know run r1: %d", resp.StatusCode)
	}
	second.submit("r1")
	st := second.await("r1", 10*time.Second)
	if st.Status != StatusObtained {
		t.Fatalf("%+v", st)
	}
	if n := second.fake.CountRequests("POST", "/builds"); n != 1 {
		t.Fatalf("%d builds for run r1 across a restart", n)
	}
}

// TestTokenNotLogged: the Buildkite token appears in no log line, even
// with every request logged.
func TestTokenNotLogged(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "finished_from", Status: 500, Times: 2})
	r.submit("tok")
	r.await("tok", 10*time.Second)
	if strings.Contains(r.log.String(), r.fake.Token) {
		t.Fatal("the Buildkite token is in the service log")
	}
	if !strings.Contains(r.log.String(), "GET") {
		t.Fatal("the log is empty: the test proves nothing")
	}
}

// TestBudgetKeepsUnderOrgLimit: against a stand-in enforcing 25 requests a
// minute, a service with a budget of 20 runs 8 builds without one 429 and
// without more than 20 requests in any minute.
func TestBudgetKeepsUnderOrgLimit(t *testing.T) {
	sc := fastScript
	sc.ResultInMetaData = true
	r := newRig(t, rigOpts{budget: 20, pollEvery: 200 * time.Millisecond, script: sc})
	r.fake.SetRateLimit(25)
	for i := range 8 {
		r.submit(fmt.Sprintf("b%d", i))
	}
	for i := range 8 {
		if st := r.await(fmt.Sprintf("b%d", i), 20*time.Second); st.Status != StatusObtained {
			t.Fatalf("b%d: %+v", i, st)
		}
	}
	if n := r.fake.RateLimited(); n != 0 {
		t.Errorf("%d answers 429", n)
	}
	if n := r.fake.MaxRequestsIn(time.Minute); n > 20 {
		t.Errorf("%d requests in one minute, budget 20", n)
	}
}

// TestBudgetKeepsUnderUserLimit: Buildkite's per-user limit
// (rate_limits.md) on top of the org's: three tokens of three users, each
// allowed 10 requests a minute by the stand-in; the service spreads its
// requests over them and none sees a 429, of either scope.
func TestBudgetKeepsUnderUserLimit(t *testing.T) {
	sc := fastScript
	sc.ResultInMetaData = true
	fake := fakebuildkite.New(nil)
	t.Cleanup(fake.Close)
	fake.SetScript(sc)
	tokens := []string{fake.Token, "bkua_second", "bkua_third"}
	fake.AddToken(tokens[1], "second")
	fake.AddToken(tokens[2], "third")
	fake.SetRateLimit(25)
	fake.SetUserRateLimit(10)
	r := newRig(t, rigOpts{fake: fake, budget: 24, perUser: 8, tokens: tokens, pollEvery: 200 * time.Millisecond})
	for i := range 8 {
		r.submit(fmt.Sprintf("u%d", i))
	}
	for i := range 8 {
		if st := r.await(fmt.Sprintf("u%d", i), 30*time.Second); st.Status != StatusObtained {
			t.Fatalf("u%d: %+v", i, st)
		}
	}
	if n, u := r.fake.RateLimitedIn(fakebuildkite.ScopeOrg), r.fake.RateLimitedIn(fakebuildkite.ScopeUser); n+u != 0 {
		t.Errorf("429 answers: %d org, %d user", n, u)
	}
	per := map[string]int{}
	for _, q := range r.fake.Requests() {
		if q.Server == "api" {
			per[strings.TrimPrefix(q.Header.Get("Authorization"), "Bearer ")]++
		}
	}
	for _, tok := range tokens {
		if per[tok] == 0 || per[tok] > 10 {
			t.Errorf("token %s… made %d requests (want 1 to 10): %v", tok[:6], per[tok], per)
		}
	}
}

// TestStartWhileBuildkiteDown: Buildkite unreachable at start (issue 18:
// kbgen serve exited 4 after 1.2 s). The service serves all the same, says
// so on its health endpoint (503, ok false), accepts runs and holds their
// creates until the startup scan succeeds; a run id whose build already
// exists then attaches to it, and a new one gets its build.
func TestStartWhileBuildkiteDown(t *testing.T) {
	fake := fakebuildkite.New(nil)
	t.Cleanup(fake.Close)
	fake.SetScript(fastScript)
	fake.SeedWithMetaData(map[string]string{"run_id": "old", "queue": "nvidia-h100", MetaDataService: "kbgen"}, fastScript, 0)
	// The rig's client tries 3 times: the first two scans fail.
	fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "/builds?", Status: 503, Times: 6})
	r := newRig(t, rigOpts{fake: fake})
	resp, body := r.do("GET", "/", nil, "")
	var h Health
	_ = json.Unmarshal(body, &h)
	if resp.StatusCode != http.StatusServiceUnavailable || h.OK || !strings.Contains(h.Buildkite, "Buildkite unreachable since") {
		t.Fatalf("health while down: %d %s", resp.StatusCode, body)
	}
	r.submit("old")
	r.submit("new")
	for _, id := range []string{"old", "new"} {
		if st := r.await(id, 20*time.Second); st.Status != StatusObtained {
			t.Fatalf("%s: %+v", id, st)
		}
	}
	if n := fake.CountRequests("POST", "/builds"); n != 1 {
		t.Errorf("%d builds created, want 1 (run old has its build)", n)
	}
	if resp, body := r.do("GET", "/", nil, ""); resp.StatusCode != 200 || !strings.Contains(string(body), `"buildkite":"ok"`) {
		t.Errorf("health after: %d %s", resp.StatusCode, body)
	}
	if !strings.Contains(r.log.String(), "Buildkite reachable again") {
		t.Errorf("log:\n%s", r.log.String())
	}
}

// TestUnlistedBuildLookedUp: a build the lists never show (their index
// lags or lost it) is looked up on its own once the progress listing,
// which saw every build in flight, missed it twice.
func TestUnlistedBuildLookedUp(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.submit("hid")
	for r.fake.CountRequests("POST", "/builds") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	r.fake.HideFromList(1)
	if st := r.await("hid", 15*time.Second); st.Status != StatusObtained {
		t.Fatalf("%+v", st)
	}
	if !strings.Contains(r.log.String(), "build 1 is in no list; looked up on its own") {
		t.Errorf("log:\n%s", r.log.String())
	}
}

// TestPagesBeyondTheTenth: 1,050 of the service's builds finish at once;
// the run's build is the oldest, on the eleventh page of the finished list,
// and is found there (it was dropped with ten pages read).
func TestPagesBeyondTheTenth(t *testing.T) {
	r := newRig(t, rigOpts{pollEvery: 300 * time.Millisecond})
	r.submit("p")
	for r.fake.CountRequests("POST", "/builds") == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	// The others finish within milliseconds, long before p (600 ms): a
	// poll that sees p finished sees all of them, newer, ahead of it. With
	// p's own script they finished just after p, and a poll between the two
	// (the seeding delayed on a loaded machine) found p on the first page.
	quick := fakebuildkite.Script{BootStart: time.Millisecond, Uploaded: 2 * time.Millisecond, EvalStart: 3 * time.Millisecond, Finish: 5 * time.Millisecond}
	for i := range 1050 {
		r.fake.SeedWithMetaData(map[string]string{"run_id": fmt.Sprintf("other-%d", i), "queue": "nvidia-h100", MetaDataService: "kbgen"}, quick, 0)
	}
	if st := r.await("p", 20*time.Second); st.Status != StatusObtained {
		t.Fatalf("%+v", st)
	}
	if strings.Contains(r.log.String(), "looked up on its own") {
		t.Errorf("found by the lookup, not the list:\n%s", r.log.String())
	}
	if n := r.fake.CountRequests("GET", "page=11"); n == 0 {
		t.Error("the eleventh page was never read")
	}
}
