package metrics

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// fed is a recorder after a little of everything, and its source.
func fed(t *testing.T) *Recorder {
	t.Helper()
	r := New()
	now := time.Now()
	fault := 75
	r.SetSource(func() Snapshot {
		return Snapshot{
			Jobs: []Job{
				{Queue: "nvidia-h100", State: JobQueued},
				{Queue: "nvidia-h100", State: JobScheduled, Runnable: now.Add(-90 * time.Second)},
				{Queue: "nvidia-h100", State: JobScheduled, Runnable: now.Add(-10 * time.Second)},
				{Queue: "amd-mi300", State: JobRunning},
			},
			AgentsKnown: true,
			Agents:      []Agent{{"nvidia-h100", AgentIdle}, {"nvidia-h100", AgentBusy}, {"nvidia-h100", AgentPaused}, {"amd-mi300", AgentLost}},
			Budget:      Budget{Limit: 100, Used: 30, OrgRemaining: 150, UserRemaining: []int{40, -1}},
		}
	})
	r.RunDone("nvidia-h100", "obtained")
	r.RunDone("nvidia-h100", "obtained")
	r.RunDone("amd-mi300", "infra")
	r.QueueWait("nvidia-h100", 3*time.Second)
	r.Detected(400 * time.Millisecond)
	r.APIRequest("poll", 200, "")
	r.APIRequest("create", 429, "rest_user")
	r.Webhook(200)
	r.Webhook(401)
	r.RunFacts(runfacts.Facts{Agent: "h100-0", Queue: "nvidia-h100", Node: "n1", GPUUUIDs: []string{"GPU-a"}, GPUModel: "H100", Driver: "550", KbgenVersion: "v1",
		Noise: "noisy", Xids: 2, ClockEventSeconds: 1.5, Exit: &fault})
	return r
}

func scrape(t *testing.T, r *Recorder) string {
	t.Helper()
	srv := httptest.NewServer(r.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("scrape: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// TestSeries checks the values a scrape shows after known events.
func TestSeries(t *testing.T) {
	t.Parallel()
	r := fed(t)
	for _, tc := range []struct {
		name, want string
		metric     []string
	}{
		{"runs by queue and outcome", `
# HELP kbgen_runs_total Runs done, by queue and outcome (obtained, runner_failed, infra, timed_out: kbgen submit's statuses).
# TYPE kbgen_runs_total counter
kbgen_runs_total{outcome="infra",queue="amd-mi300"} 1
kbgen_runs_total{outcome="obtained",queue="nvidia-h100"} 2
`, []string{"kbgen_runs_total"}},
		{"agents by state", `
# HELP kbgen_agents Agents by queue and state (idle, busy, paused, lost), from the cached queue view and the roster.
# TYPE kbgen_agents gauge
kbgen_agents{queue="amd-mi300",state="busy"} 0
kbgen_agents{queue="amd-mi300",state="idle"} 0
kbgen_agents{queue="amd-mi300",state="lost"} 1
kbgen_agents{queue="amd-mi300",state="paused"} 0
kbgen_agents{queue="nvidia-h100",state="busy"} 1
kbgen_agents{queue="nvidia-h100",state="idle"} 1
kbgen_agents{queue="nvidia-h100",state="lost"} 0
kbgen_agents{queue="nvidia-h100",state="paused"} 1
`, []string{"kbgen_agents"}},
		{"rate limits", `
# HELP kbgen_api_rate_limited_total Buildkite REST answers 429, by the scope the answer named (rest: the organization, rest_user: the token's user, unknown).
# TYPE kbgen_api_rate_limited_total counter
kbgen_api_rate_limited_total{scope="rest_user"} 1
# HELP kbgen_api_budget_left REST requests kbgen serve may still send in the current 61 seconds by its own count.
# TYPE kbgen_api_budget_left gauge
kbgen_api_budget_left 70
# HELP kbgen_api_rate_limit_remaining Buildkite's last RateLimit-Remaining (scope rest: the organization) and RateLimit-User-Remaining (scope rest_user, per token index); absent until Buildkite said.
# TYPE kbgen_api_rate_limit_remaining gauge
kbgen_api_rate_limit_remaining{scope="rest",token=""} 150
kbgen_api_rate_limit_remaining{scope="rest_user",token="0"} 40
`, []string{"kbgen_api_rate_limited_total", "kbgen_api_budget_left", "kbgen_api_rate_limit_remaining"}},
		{"per agent", `
# HELP kbgen_agent_machine_faults_total Runs on this agent that exited 75 (a machine fault: Buildkite retries elsewhere).
# TYPE kbgen_agent_machine_faults_total counter
kbgen_agent_machine_faults_total{agent="h100-0",queue="nvidia-h100"} 1
# HELP kbgen_agent_clock_event_seconds_total Seconds this agent's GPU clocks were held down by external clock events during timed runs (noise records).
# TYPE kbgen_agent_clock_event_seconds_total counter
kbgen_agent_clock_event_seconds_total{agent="h100-0",queue="nvidia-h100"} 1.5
# HELP kbgen_agent_info 1 for each GPU of each agent, from its latest run's facts (else the node and GPUs kbgen node install tagged it with); join with DCGM's or AMD's exporter on gpu_uuid (docs/operations.md).
# TYPE kbgen_agent_info gauge
kbgen_agent_info{agent="h100-0",driver="550",gpu_model="H100",gpu_uuid="GPU-a",kbgen_version="v1",node="n1",queue="nvidia-h100"} 1
`, []string{"kbgen_agent_machine_faults_total", "kbgen_agent_clock_event_seconds_total", "kbgen_agent_info"}},
		{"webhooks", `
# HELP kbgen_webhooks_total Buildkite webhooks received, by result (accepted, refused: bad signature or token, rejected: unreadable, busy: too many at once).
# TYPE kbgen_webhooks_total counter
kbgen_webhooks_total{result="accepted"} 1
kbgen_webhooks_total{result="refused"} 1
`, []string{"kbgen_webhooks_total"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if err := testutil.GatherAndCompare(r.Registry(), strings.NewReader(strings.TrimPrefix(tc.want, "\n")), tc.metric...); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestOldestScheduled: the oldest scheduled job's age, per queue.
func TestOldestScheduled(t *testing.T) {
	t.Parallel()
	out := scrape(t, fed(t))
	var age float64
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, `kbgen_oldest_scheduled_job_age_seconds{queue="nvidia-h100"}`) {
			_, _ = fmt.Sscanf(strings.Fields(l)[1], "%g", &age)
		}
	}
	if age < 89 || age > 120 {
		t.Errorf("oldest scheduled age %g s, want about 90 s:\n%s", age, out)
	}
	if !strings.Contains(out, `kbgen_jobs{queue="nvidia-h100",state="scheduled"} 2`) || !strings.Contains(out, `kbgen_jobs{queue="amd-mi300",state="running"} 1`) {
		t.Errorf("jobs by state missing:\n%s", out)
	}
}

// TestLabelsBounded: past the cap, new agents count under "other", and
// hostile bytes never reach a label.
func TestLabelsBounded(t *testing.T) {
	t.Parallel()
	r := New()
	for i := range MaxAgents + 10 {
		r.RunFacts(runfacts.Facts{Agent: fmt.Sprintf("a%d\n", i), Queue: "q"})
	}
	n := testutil.CollectAndCount(r.perAgent.runs)
	if n != MaxAgents+1 {
		t.Errorf("%d agent series, want %d (the cap and other)", n, MaxAgents+1)
	}
	if got := testutil.ToFloat64(r.perAgent.runs.WithLabelValues(Other, "q")); got != 10 {
		t.Errorf("other counted %g runs, want 10", got)
	}
	if strings.Contains(scrape(t, r), "a0\n\"") {
		t.Error("a newline reached a label")
	}
}

// TestPromtoolCheck: promtool, Prometheus' own linter, accepts a scrape.
func TestPromtoolCheck(t *testing.T) {
	t.Parallel()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool is not installed (Debian: prometheus)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(scrape(t, fed(t)))
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("promtool check metrics: %v\n%s", err, out.String())
	}
}

// TestCanarySeries: each judged agent's canary verdict is three series at
// scrape (drifting 1 or 0, offset flagged 1 or 0, the offset), with its agent and queue labels;
// agents past the agents' cap are left out rather than summed.
func TestCanarySeries(t *testing.T) {
	t.Parallel()
	r := New()
	var cs []Canary
	for i := range MaxAgents + 5 {
		cs = append(cs, Canary{Agent: "agent-" + strconv.Itoa(i), Queue: "nvidia-h100", Offset: 0.01})
	}
	cs[0].Drifting, cs[0].Offset, cs[0].Off = true, -0.04, true
	r.SetSource(func() Snapshot { return Snapshot{Canaries: cs} })
	out := scrape(t, r)
	for _, want := range []string{
		`kbgen_canary_drifting{agent="agent-0",queue="nvidia-h100"} 1`,
		`kbgen_canary_offset_ratio{agent="agent-0",queue="nvidia-h100"} -0.04`,
		`kbgen_canary_offset_flagged{agent="agent-0",queue="nvidia-h100"} 1`,
		`kbgen_canary_drifting{agent="agent-1",queue="nvidia-h100"} 0`,
		`kbgen_canary_offset_flagged{agent="agent-1",queue="nvidia-h100"} 0`,
	} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("scrape lacks %s", want)
		}
	}
	if n := strings.Count(out, "\nkbgen_canary_drifting{"); n != MaxAgents {
		t.Errorf("%d drifting series, want %d (the cap)", n, MaxAgents)
	}
	if strings.Contains(out, `agent="other"`) {
		t.Error("agents past the cap were summed into other")
	}
}
