package serve

import (
	"bytes"
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
	if st.Status != StatusTimedOut || !strings.Contains(st.Result.Error, "timed out after") || !strings.Contains(st.Result.Error, "canceled") {
		t.Fatalf("%+v %+v", st, st.Result)
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
