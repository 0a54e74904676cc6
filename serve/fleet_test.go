package serve

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/roster"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

const testViewToken = "kbgen-view-token-456"

// TestViewToken: the view token reads /metrics and nothing else; the
// server token still reads it; without either, 401.
func TestViewToken(t *testing.T) {
	r := newRig(t, rigOpts{view: testViewToken})
	for _, tc := range []struct {
		name, method, path, token string
		want                      int
	}{
		{"view token scrapes", "GET", "/metrics", testViewToken, http.StatusOK},
		{"server token scrapes", "GET", "/metrics", testToken, http.StatusOK},
		{"no token", "GET", "/metrics", "", http.StatusUnauthorized},
		{"wrong token", "GET", "/metrics", "nope", http.StatusUnauthorized},
		{"view token cannot submit", "POST", "/v1/runs", testViewToken, http.StatusUnauthorized},
		{"view token cannot cancel", "DELETE", "/v1/runs/x", testViewToken, http.StatusUnauthorized},
		{"view token cannot read runs", "GET", "/v1/runs/x", testViewToken, http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var body any
			if tc.method == "POST" {
				body = RunRequest{RunID: "v1", Queue: "nvidia-h100", Payload: testPayload(t)}
			}
			resp, got := r.do(tc.method, tc.path, body, tc.token)
			if resp.StatusCode != tc.want {
				t.Fatalf("%s %s: %d, want %d: %s", tc.method, tc.path, resp.StatusCode, tc.want, got)
			}
		})
	}
	if r.svc.runs.get("v1") != nil {
		t.Error("the view token's POST made a run")
	}
	if err := CheckTokens("same", "same"); err == nil {
		t.Error("a view token equal to the server token was accepted")
	}
}

// TestMetricsAfterRuns: after runs end, a scrape shows them by queue and
// outcome, their queue waits, their detection latency, the API requests
// by class, the webhook counts and each agent's facts.
func TestMetricsAfterRuns(t *testing.T) {
	const secret = "whsec-123"
	sc := fastScript
	sc.ResultInMetaData = true
	sc.Facts = &runfacts.Facts{Agent: "gpu-node-3-gpu0", Queue: "nvidia-h100", Node: "gpu-node-3", GPUUUIDs: []string{"GPU-0a1b"},
		GPUModel: "NVIDIA H100 80GB HBM3", Driver: "550.54.15", KbgenVersion: "v9.9.9", Noise: "noisy", Xids: 1, ClockEventSeconds: 0.25}
	r := newRig(t, rigOpts{script: sc, secret: secret})
	for _, id := range []string{"m1", "m2"} {
		r.submit(id)
	}
	for _, id := range []string{"m1", "m2"} {
		if st := r.await(id, 10*time.Second); st.Status != StatusObtained {
			t.Fatalf("%s: %+v", id, st)
		}
	}
	if code := r.postHook([]byte(`{}`), map[string]string{"X-Buildkite-Token": "forged"}); code != http.StatusUnauthorized {
		t.Fatalf("forged webhook: %d", code)
	}
	resp, body := r.do("GET", "/metrics", nil, testToken)
	if resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %s", resp.StatusCode, body)
	}
	out := string(body)
	for _, tc := range []struct {
		name, series string
		want         float64 // at least
		exact        bool
	}{
		{"runs by outcome", `kbgen_runs_total{outcome="obtained",queue="nvidia-h100"}`, 2, true},
		{"queue waits", `kbgen_queue_wait_seconds_count{queue="nvidia-h100"}`, 2, true},
		{"detection", `kbgen_detection_latency_seconds_count`, 2, true},
		{"creates", `kbgen_api_requests_total{class="create"}`, 2, false},
		{"polls", `kbgen_api_requests_total{class="poll"}`, 1, false},
		{"refused webhook", `kbgen_webhooks_total{result="refused"}`, 1, true},
		{"agent runs", `kbgen_agent_runs_total{agent="gpu-node-3-gpu0",queue="nvidia-h100"}`, 2, true},
		{"agent noisy", `kbgen_agent_noisy_runs_total{agent="gpu-node-3-gpu0",queue="nvidia-h100"}`, 2, true},
		{"agent xids", `kbgen_agent_xids_total{agent="gpu-node-3-gpu0",queue="nvidia-h100"}`, 2, true},
		{"agent info", `kbgen_agent_info{agent="gpu-node-3-gpu0",driver="550.54.15",gpu_model="NVIDIA H100 80GB HBM3",gpu_uuid="GPU-0a1b",kbgen_version="v9.9.9",node="gpu-node-3",queue="nvidia-h100"}`, 1, true},
		{"budget limit", `kbgen_api_budget_limit`, 6000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := sample(out, tc.series)
			if !ok || got < tc.want || (tc.exact && got != tc.want) {
				t.Errorf("%s = %g (present %v), want %g:\n%s", tc.series, got, ok, tc.want, out)
			}
		})
	}
	// The fake's eval job is runnable at Uploaded and starts at EvalStart:
	// each wait is 50 ms, well under the first bucket's 1 s.
	if got, _ := sample(out, `kbgen_queue_wait_seconds_bucket{queue="nvidia-h100",le="1"}`); got != 2 {
		t.Errorf("queue waits under 1 s: %g, want 2", got)
	}
}

// sample is the value of one series in a scrape.
func sample(out, series string) (float64, bool) {
	re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(series) + ` (\S+)$`)
	m := re.FindStringSubmatch(out)
	if m == nil {
		return 0, false
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(m[1]), 64)
	return v, err == nil
}

// TestMetricsMachineFault: a first attempt that exits 75 counts as a
// machine fault on its agent, and both attempts count as its runs: each
// attempt's facts have their own meta-data key (the list answers without
// retried jobs, so the build's jobs cannot say it).
func TestMetricsMachineFault(t *testing.T) {
	sc := fastScript
	sc.RetryExit = 75
	sc.Facts = &runfacts.Facts{Agent: "gpu-node-3-gpu0", Queue: "nvidia-h100"}
	r := newRig(t, rigOpts{script: sc})
	r.submit("f1")
	if st := r.await("f1", 10*time.Second); st.Status != StatusObtained {
		t.Fatalf("%+v", st)
	}
	_, body := r.do("GET", "/metrics", nil, testToken)
	for series, want := range map[string]float64{
		`kbgen_agent_machine_faults_total{agent="gpu-node-3-gpu0",queue="nvidia-h100"}`: 1,
		`kbgen_agent_runs_total{agent="gpu-node-3-gpu0",queue="nvidia-h100"}`:           2,
	} {
		if got, ok := sample(string(body), series); !ok || got != want {
			t.Errorf("%s = %g (present %v), want %g:\n%s", series, got, ok, want, r.log.String())
		}
	}
}

// TestForgedFactsNotCounted: a run's facts count only as what Buildkite
// says of its build. Facts naming an agent other than the one Buildkite
// says ran the eval job (another vendor's), or another queue than the
// run's, are refused and logged: an agent host is trusted for its own
// hardware only, and meta-data is any job's of the build to set.
func TestForgedFactsNotCounted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		facts runfacts.Facts
		want  string // in the log
	}{
		{"another agent", runfacts.Facts{Agent: "other-vendor-gpu0", Queue: "nvidia-h100", Node: "other-node"}, `name agent "other-vendor-gpu0", but Buildkite says job`},
		{"another queue", runfacts.Facts{Agent: "gpu-node-3-gpu0", Queue: "amd-mi300", Node: "gpu-node-3"}, `name queue "amd-mi300", but the run is on "nvidia-h100"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sc := fastScript
			sc.Agent = "gpu-node-3-gpu0" // what Buildkite says ran the job
			sc.Facts = &tc.facts
			r := newRig(t, rigOpts{script: sc})
			r.submit("forged")
			if st := r.await("forged", 10*time.Second); st.Status != StatusObtained {
				t.Fatalf("%+v", st)
			}
			_, body := r.do("GET", "/metrics", nil, testToken)
			if strings.Contains(string(body), "kbgen_agent_runs_total{") || strings.Contains(string(body), tc.facts.Node) {
				t.Errorf("forged facts reached the metrics:\n%s", body)
			}
			if l := r.svc.Roster().List(); len(l) != 0 {
				t.Errorf("forged facts reached the roster: %+v", l)
			}
			if !strings.Contains(r.log.String(), tc.want) {
				t.Errorf("log lacks %q:\n%s", tc.want, r.log.String())
			}
		})
	}
}

// TestStoreKeepsRuns: with a store, each finished run is kept with its
// queue, outcome, wait and every attempt's facts.
func TestStoreKeepsRuns(t *testing.T) {
	st, err := fleetstore.Open(context.Background(), fleetstore.Options{Path: filepath.Join(t.TempDir(), "s.db"), Service: "kbgen"})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	sc := fastScript
	sc.RetryExit = 75
	sc.Facts = &runfacts.Facts{Agent: "gpu-node-3-gpu0", Queue: "nvidia-h100", Node: "gpu-node-3", Noise: "clean"}
	r := newRig(t, rigOpts{script: sc, store: st})
	r.submit("s1")
	r.await("s1", 10*time.Second)
	var runs []fleetstore.Run
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(runs) == 0; time.Sleep(20 * time.Millisecond) {
		if runs, err = st.RunsSince(context.Background(), time.Time{}, 10); err != nil {
			t.Fatal(err)
		}
	}
	if len(runs) != 1 {
		t.Fatalf("kept %d runs, want 1; log:\n%s", len(runs), r.log.String())
	}
	k := runs[0]
	if k.ID != "s1" || k.Queue != "nvidia-h100" || k.Outcome != StatusObtained || k.Build == 0 || k.FinishedAt.IsZero() || len(k.Attempts) != 2 {
		t.Fatalf("kept %+v", k)
	}
	if a := k.Attempts[0]; a.Attempt != 1 || a.Exit == nil || *a.Exit != 75 || a.Agent != "gpu-node-3-gpu0" {
		t.Errorf("first attempt %+v, want exit 75 on gpu-node-3-gpu0", a)
	}
	// The roster learned the agent from the facts and kept it: a new
	// service on the same store starts with it.
	var kept []roster.Agent
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline) && len(kept) == 0; time.Sleep(20 * time.Millisecond) {
		kept, _ = st.Agents(context.Background())
	}
	if len(kept) != 1 || kept[0].Name != "gpu-node-3-gpu0" || kept[0].Node != "gpu-node-3" {
		t.Fatalf("kept roster %+v", kept)
	}
	again := newRig(t, rigOpts{store: st})
	if l := again.svc.Roster().List(); len(l) != 1 || l[0].Name != "gpu-node-3-gpu0" {
		t.Errorf("restored roster %+v", l)
	}
	// …and its info series before any run of the new service.
	if _, scrape := again.do("GET", "/metrics", nil, testToken); !regexp.MustCompile(`(?m)^kbgen_agent_info\{agent="gpu-node-3-gpu0",.*node="gpu-node-3",queue="nvidia-h100"\} 1$`).Match(scrape) {
		t.Errorf("the restarted service's scrape lacks gpu-node-3-gpu0's kbgen_agent_info")
	}
}

// signedHook posts a webhook body signed as Buildkite signs them.
func (r *rig) signedHook(secret string, body []byte) int {
	r.t.Helper()
	return r.signedHookAt(secret, body, time.Now())
}

// signedHookAt signs body as sent at at (a rig whose clock is moved).
func (r *rig) signedHookAt(secret string, body []byte, at time.Time) int {
	r.t.Helper()
	ts := strconv.FormatInt(at.Unix(), 10)
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return r.postHook(body, map[string]string{"X-Buildkite-Signature": "timestamp=" + ts + ",signature=" + hex.EncodeToString(mac.Sum(nil))})
}

// TestRosterQuarantineAndLost: a quarantine (Buildkite's agent pause) and
// an agent.lost webhook each take an agent out of the queue's idle count
// (Kernelbot's available_runners) at once; the roster, the metrics and
// GET /v1/agents say why; resume brings the agent back. The view token
// reads the roster but cannot quarantine.
func TestRosterQuarantineAndLost(t *testing.T) {
	const secret = "whsec-roster"
	r := newRig(t, rigOpts{secret: secret, view: testViewToken})
	r.fake.SetAgents([]fakebuildkite.AgentSpec{{Name: "h100-0", Queue: "nvidia-h100"}, {Name: "h100-1", Queue: "nvidia-h100"}, {Name: "h100-2", Queue: "nvidia-h100"}})
	r.fake.SetTokenScopes(r.fake.Token, append(contract.APIScopeNames(), "write_agents")...)
	idle := func() int {
		resp, body := r.do("GET", "/v1/queues/nvidia-h100", nil, testToken)
		var q QueueStatus
		if resp.StatusCode != 200 || json.Unmarshal(body, &q) != nil {
			t.Fatalf("queues: %d %s", resp.StatusCode, body)
		}
		return q.Idle
	}
	if n := idle(); n != 3 {
		t.Fatalf("idle %d, want 3", n)
	}
	q := QuarantineRequest{Note: "3 machine faults in an hour", TimeoutMinutes: 30}
	if resp, body := r.do("POST", "/v1/agents/h100-0/quarantine", q, testViewToken); resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("the view token quarantined: %d %s", resp.StatusCode, body)
	}
	if resp, body := r.do("POST", "/v1/agents/h100-0/quarantine", q, testToken); resp.StatusCode != 200 {
		t.Fatalf("quarantine: %d %s", resp.StatusCode, body)
	}
	if note, _, ok := r.fake.AgentPause("h100-0"); !ok || !strings.Contains(note, q.Note) {
		t.Fatalf("Buildkite's pause: %q %v", note, ok)
	}
	if n := idle(); n != 2 {
		t.Errorf("idle %d after a quarantine, want 2", n)
	}
	lost := []byte(`{"event": "agent.lost", "agent": {"name": "h100-1", "meta_data": ["queue=nvidia-h100"]}}`)
	if code := r.signedHook(secret, lost); code != 200 {
		t.Fatalf("agent.lost webhook: %d", code)
	}
	if n := idle(); n != 1 {
		t.Errorf("idle %d after agent.lost, want 1", n)
	}
	resp, body := r.do("GET", "/v1/agents", nil, testViewToken)
	var agents []roster.Agent
	if resp.StatusCode != 200 || json.Unmarshal(body, &agents) != nil {
		t.Fatalf("agents: %d %s", resp.StatusCode, body)
	}
	got := map[string]string{}
	for _, a := range agents {
		got[a.Name] = a.State()
	}
	if got["h100-0"] != "paused" || got["h100-1"] != "lost" || got["h100-2"] != "idle" {
		t.Errorf("roster states %v", got)
	}
	_, body = r.do("GET", "/metrics", nil, testViewToken)
	for series, want := range map[string]float64{`kbgen_agents{queue="nvidia-h100",state="lost"}`: 1, `kbgen_agents{queue="nvidia-h100",state="paused"}`: 1, `kbgen_agents{queue="nvidia-h100",state="idle"}`: 1} {
		if v, ok := sample(string(body), series); !ok || v != want {
			t.Errorf("%s = %g (%v), want %g", series, v, ok, want)
		}
	}
	if resp, body := r.do("POST", "/v1/agents/h100-0/resume", nil, testToken); resp.StatusCode != 200 {
		t.Fatalf("resume: %d %s", resp.StatusCode, body)
	}
	if _, _, ok := r.fake.AgentPause("h100-0"); ok {
		t.Error("still paused in Buildkite after resume")
	}
	if resp, _ := r.do("POST", "/v1/agents/nobody/quarantine", q, testToken); resp.StatusCode != http.StatusNotFound {
		t.Errorf("quarantine of an unknown agent: %d, want 404", resp.StatusCode)
	}
}

// TestRecoveredRunIsNoDetection: a run a restarted service finds already
// finished is counted as a run, but its delay (the restart's) is not a
// detection latency.
func TestRecoveredRunIsNoDetection(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.submit("rec1")
	r.await("rec1", 10*time.Second)
	again := newRig(t, rigOpts{fake: r.fake})
	if st := again.await("rec1", 10*time.Second); st.Status != StatusObtained {
		t.Fatalf("recovered: %+v", st)
	}
	_, body := again.do("GET", "/metrics", nil, testToken)
	if v, _ := sample(string(body), `kbgen_detection_latency_seconds_count`); v != 0 {
		t.Errorf("the recovered run counted as a detection (%g):\n%s", v, body)
	}
	if v, _ := sample(string(body), `kbgen_runs_total{outcome="obtained",queue="nvidia-h100"}`); v != 1 {
		t.Errorf("the recovered run is not counted as a run (%g)", v)
	}
}

// TestInstalledAgentInRoster: an agent `kbgen node install` registered
// (its kbgen-agent, kbgen-node and kbgen-gpus tags in Buildkite's agent
// list) is in the roster with its node and GPUs, on the dashboard under
// its node, in kbgen_agent_info and in the queue's available runners
// before it has run any job.
func TestInstalledAgentInRoster(t *testing.T) {
	r := newRig(t, rigOpts{view: testViewToken})
	const uuid = "GPU-5a1c3333-4c1e-2f6a-9d0b-e3f1a2b40003"
	r.fake.SetAgents([]fakebuildkite.AgentSpec{{Name: "gpu-node-7-gpu3", Queue: "nvidia-h100",
		Tags: []string{contract.AgentTag + "=gpu-node-7-gpu3", contract.NodeTag + "=gpu-node-7", contract.GPUsTag + "=" + uuid}}})
	resp, body := r.do("GET", "/v1/queues/nvidia-h100", nil, testToken)
	var q QueueStatus
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &q) != nil || q.Idle != 1 {
		t.Fatalf("queue status %d %s; want the installed agent idle (available_runners 1)", resp.StatusCode, body)
	}
	_, body = r.do("GET", "/v1/agents", nil, testViewToken)
	var agents []roster.Agent
	if err := json.Unmarshal(body, &agents); err != nil || len(agents) != 1 || agents[0].Node != "gpu-node-7" || !slices.Equal(agents[0].GPUUUIDs, []string{uuid}) || !agents[0].LastJob.IsZero() {
		t.Fatalf("roster %s (%v); want gpu-node-7-gpu3 on gpu-node-7 with its GPU, no job", body, err)
	}
	_, page := r.do("GET", "/dashboard", nil, testViewToken)
	if p := string(page); !strings.Contains(p, "<h3>gpu-node-7</h3>") || !strings.Contains(p, `data-agent="gpu-node-7-gpu3"`) {
		t.Errorf("the dashboard does not list gpu-node-7-gpu3 under gpu-node-7:\n%s", p)
	}
	_, scrape := r.do("GET", "/metrics", nil, testViewToken)
	if want := `kbgen_agent_info{agent="gpu-node-7-gpu3",driver="",gpu_model="",gpu_uuid="` + uuid + `",kbgen_version="",node="gpu-node-7",queue="nvidia-h100"}`; !strings.Contains(string(scrape), want+" 1\n") {
		t.Errorf("scrape lacks %s", want)
	}
}
