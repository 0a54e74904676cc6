package serve

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/canary"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/registry"
)

// canaryScript is a quick build whose result scores score (one benchmark
// whose mean is score) on agent, its facts saying noise.
func canaryScript(agent string, score float64, noise string) fakebuildkite.Script {
	res := fmt.Sprintf(`{"success": true, "error": "", "system": {"gpu": "NVIDIA H100 80GB HBM3", "cpu": "AMD EPYC 9654"}, "runs": {"benchmark": {"start": "2026-01-02T03:04:05.000000", "end": "2026-01-02T03:04:09.500000", "compilation": null, "run": {"success": true, "passed": true, "command": "python3 eval.py benchmark", "stdout": "", "stderr": "", "exit_code": 0, "duration": 4.5, "result": {"check": "pass", "benchmark-count": "1", "benchmark.0.mean": "%g"}}, "profile": null}}}`, score)
	return fakebuildkite.Script{BootStart: 10 * time.Millisecond, Uploaded: 30 * time.Millisecond, EvalStart: 40 * time.Millisecond, Finish: 120 * time.Millisecond,
		ResultInMetaData: true, Artifacts: map[string][]byte{contract.ResultFile: []byte(res)},
		Facts: &runfacts.Facts{Agent: agent, Queue: "nvidia-h100", Node: strings.Split(agent, "-")[0], GPUModel: "NVIDIA H100 80GB HBM3",
			Driver: "550.54.15", ImageDigest: "sha256:ab", KbgenVersion: "v1.0.0", Noise: noise}}
}

// canaryFleet answers each canary from its agent's list of scores (a
// negative score is a noisy run of that magnitude); past the list, the
// last score again.
type canaryFleet struct {
	mu     sync.Mutex
	scores map[string][]float64
	served map[string]int
	// upTo, when set, is how many canaries an agent's series gets: past
	// it a canary's build fails (no point), so an agent that finishes
	// ahead of its peers keeps the series runCanaries asked for.
	upTo int
	envs []map[string]string
	// slow adds to a targeted run's finish (a re-run a restart interrupts).
	slow time.Duration
}

func (f *canaryFleet) script(env map[string]string) fakebuildkite.Script {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.envs = append(f.envs, env)
	agent := env[contract.EnvTargetAgent]
	if agent == "" {
		agent = untargeted // a run Kernelbot sent: any agent of the queue
	}
	if f.upTo > 0 && f.served[agent] >= f.upTo && env[contract.EnvTargetAgent] != "" {
		return fakebuildkite.Script{BootStart: 10 * time.Millisecond, Uploaded: 30 * time.Millisecond, BootstrapFails: true}
	}
	list := f.scores[agent]
	i := min(f.served[agent], len(list)-1)
	f.served[agent]++
	noise := "clean"
	if list[i] < 0 {
		noise = canary.NoisyVerdict
	}
	sc := canaryScript(agent, max(list[i], -list[i]), noise)
	if env[contract.EnvTargetAgent] != "" {
		sc.Finish += f.slow
	}
	return sc
}

// untargeted is the agent that runs the fleet's untargeted runs.
const untargeted = "node0-gpu0"

func newCanaryRig(t *testing.T, f *canaryFleet, every time.Duration, quarantine bool) *rig {
	t.Helper()
	return newCanaryRigWith(t, f, rigOpts{canary: CanaryConfig{Every: every, Payload: testPayload(t), Quarantine: quarantine}})
}

// newCanaryRigWith is newCanaryRig with more of the service's options.
func newCanaryRigWith(t *testing.T, f *canaryFleet, o rigOpts) *rig {
	t.Helper()
	r := newRig(t, o)
	r.fake.SetScriptFor(f.script)
	var agents []fakebuildkite.AgentSpec
	for name := range f.scores {
		agents = append(agents, fakebuildkite.AgentSpec{Name: name, Queue: "nvidia-h100"})
	}
	r.fake.SetAgents(agents)
	if resp, body := r.do("GET", "/v1/queues", nil, testToken); resp.StatusCode != http.StatusOK {
		t.Fatalf("queues: %d %s", resp.StatusCode, body)
	}
	return r
}

// runCanaries ticks the canary loop until every agent had n canaries
// finish (noisy ones included), and none more: the ticks that wait for
// a slower agent give the others failing builds (canaryFleet.upTo).
func (r *rig) runCanaries(f *canaryFleet, n int) {
	r.t.Helper()
	f.mu.Lock()
	f.upTo = n
	f.mu.Unlock()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		r.svc.canaryTick()
		if r.canariesDone(f, n) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("canaries not done; log:\n%s", r.log.String())
}

func (r *rig) canariesDone(f *canaryFleet, n int) bool {
	c := r.svc.canary
	c.mu.Lock()
	defer c.mu.Unlock()
	for agent := range f.scores {
		if len(c.points[agent]) < n {
			return false
		}
	}
	return true
}

// TestCanaryBuild: a canary is a build targeted at one agent by its
// kbgen-agent tag at the lowest priority; the generator, given that
// build's env, makes the eval step say so.
func TestCanaryBuild(t *testing.T) {
	f := &canaryFleet{scores: map[string][]float64{"node1-gpu0": {1000}}, served: map[string]int{}}
	r := newCanaryRig(t, f, time.Hour, false)
	r.runCanaries(f, 1)
	env, meta, _ := r.fake.CreatedEnv(1)
	if env[contract.EnvTargetAgent] != "node1-gpu0" || env[contract.EnvPriority] != "-100" || !canary.IsCanary(env[contract.EnvRunID]) {
		t.Fatalf("canary build env: target %q, priority %q, run id %q", env[contract.EnvTargetAgent], env[contract.EnvPriority], env[contract.EnvRunID])
	}
	if meta[contract.MetaDataQueue] != "nvidia-h100" {
		t.Errorf("meta-data queue %q", meta[contract.MetaDataQueue])
	}
	// Canceled if it has not run within its interval.
	if dl, err := time.Parse(time.RFC3339, meta[MetaDataDeadline]); err != nil || dl.Before(time.Now().Add(59*time.Minute)) || dl.After(time.Now().Add(61*time.Minute)) {
		t.Errorf("deadline %q (%v), want about an hour from now", meta[MetaDataDeadline], err)
	}
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	p, _, err := pipelinegen.FromBuild(reg, pipelinegen.Build{Lookup: contract.MapLookup(env)}, pipelinegen.Options{})
	if err != nil {
		t.Fatal(err)
	}
	step, err := pipelinegen.EvalStep(p)
	if err != nil {
		t.Fatal(err)
	}
	agents, _ := step.RemainingFields["agents"].(map[string]any)
	if agents[contract.AgentTag] != "node1-gpu0" || agents["queue"] != "nvidia-h100" || step.RemainingFields["priority"] != contract.PriorityLowest {
		t.Errorf("eval step agents %v priority %v; want the agent's tag, its queue, %d", agents, step.RemainingFields["priority"], contract.PriorityLowest)
	}
	// Every hour: no second canary at the next ticks.
	r.svc.canaryTick()
	r.svc.canaryTick()
	if n := r.fake.CountRequests("POST", "/builds"); n != 1 {
		t.Errorf("%d builds created, want 1 within the interval", n)
	}
}

// TestCanariesFlowIntoBaseline: canaries' results become each agent's
// series; a noisy canary is re-run, not scored; two canaries 10 % slow
// after a baseline of eight flag the agent, which is quarantined (paused
// in Buildkite) as the operator asked; its steady peer is not.
func TestCanariesFlowIntoBaseline(t *testing.T) {
	steady := []float64{1000, 1002, 998, 1001, 999, 1000, 1003, 997, 1001, 999}
	slow := []float64{1000, 1002, 998, -5000, 1001, 999, 1000, 1003, 997, 1100, 1101}
	f := &canaryFleet{scores: map[string][]float64{"node1-gpu0": steady, "node2-gpu0": slow}, served: map[string]int{}}
	// Every tick is due: the test's series in seconds.
	r := newCanaryRig(t, f, time.Nanosecond, true)
	// Quarantine pauses the agent: the token needs write_agents (agents.md).
	r.fake.SetTokenScopes(r.fake.Token, append(contract.APIScopeNames(), "write_agents")...)
	r.runCanaries(f, len(slow))

	resp, body := r.do("GET", "/v1/canaries", nil, testToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/canaries: %d %s", resp.StatusCode, body)
	}
	var rep CanaryReport
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	states := map[string]CanaryAgent{}
	for _, a := range rep.Agents {
		states[a.Agent] = a
	}
	if a := states["node1-gpu0"]; a.State != canary.OK || a.Baseline.N != 8 || a.Baseline.Median != 1000 {
		t.Errorf("steady agent: %s, baseline %+v", a.State, a.Baseline)
	}
	if a := states["node2-gpu0"]; a.State != canary.Drift || a.Streak != 2 || a.Rerun != 1 || a.Baseline.Median != 1000 {
		t.Errorf("slow agent: %s streak %d rerun %d baseline %+v; want drift, 2, 1 noisy re-run, median 1000", a.State, a.Streak, a.Rerun, a.Baseline)
	}
	if a := states["node2-gpu0"]; len(a.Points) < len(slow) || a.Context.Driver != "550.54.15" || a.Fingerprint != "NVIDIA H100 80GB HBM3 / AMD EPYC 9654" {
		t.Errorf("slow agent's series: %d points, context %+v, fingerprint %q", len(a.Points), a.Context, a.Fingerprint)
	}
	if note, _, ok := r.fake.AgentPause("node2-gpu0"); !ok || !strings.Contains(note, "canary drift on agent node2-gpu0") {
		t.Errorf("slow agent not quarantined (paused %v, note %q)", ok, note)
	}
	if _, _, ok := r.fake.AgentPause("node1-gpu0"); ok {
		t.Error("the steady agent was paused")
	}
	_, scrape := r.do("GET", "/metrics", nil, testToken)
	for series, want := range map[string]float64{
		`kbgen_canary_drifting{agent="node2-gpu0",queue="nvidia-h100"}`: 1,
		`kbgen_canary_drifting{agent="node1-gpu0",queue="nvidia-h100"}`: 0,
	} {
		if got, ok := sample(string(scrape), series); !ok || got != want {
			t.Errorf("%s = %v (present %v), want %v", series, got, ok, want)
		}
	}
	promtoolCheck(t, scrape)
	// The dashboard draws each agent's quiet canaries (the noisy one
	// left out) as a sparkline in its row, with its state.
	_, page := r.do("GET", "/dashboard", nil, testToken)
	row := string(page)
	if i := strings.Index(row, `data-agent="node2-gpu0"`); i >= 0 {
		row = row[i:]
		row = row[:strings.Index(row, "</tr>")]
	}
	if want := fmt.Sprintf(`aria-label="%d canaries; change points: 0"`, len(slow)-1); !strings.Contains(row, want) || !strings.Contains(row, `<span class="drift">drift</span>`) {
		t.Errorf("the slow agent's dashboard row lacks its sparkline (%s) or its drift:\n%s", want, row)
	}
	sts, known := r.svc.CanaryStatuses()
	if !known || len(sts) != 2 {
		t.Fatalf("CanaryStatuses = %+v, %v", sts, known)
	}
	for _, st := range sts {
		if st.Agent == "node2-gpu0" && (st.Drift < 0.09 || st.Queue != "nvidia-h100") {
			t.Errorf("alert status of the slow agent: %+v", st)
		}
	}
}

// TestCanaryDriftAlert: with canaries and alerts on, the alerts read the
// canaries' verdicts: an agent whose two canaries are slow past the
// canary floor is a canary_drift alarm once held 15 minutes, and its
// recovery (canaries back at the baseline) resolves it; its steady peer
// never alarms. 3 % slow is drift by the canary rule (floor 2 %) and so
// an alarm, though under the 5 % the alarm once used.
func TestCanaryDriftAlert(t *testing.T) {
	for _, tc := range []struct {
		name string
		slow float64
	}{
		{"10 % slow", 1.10},
		{"3 % slow, past the canary floor", 1.03},
	} {
		t.Run(tc.name, func(t *testing.T) {
			steady := []float64{1000, 1002, 998, 1001, 999, 1000, 1003, 997, 1001, 999}
			slow := []float64{1000, 1002, 998, 1001, 999, 1000, 1003, 997, 1000 * tc.slow, 1001 * tc.slow, 1000, 1001}
			f := &canaryFleet{scores: map[string][]float64{"node1-gpu0": steady, "node2-gpu0": slow}, served: map[string]int{}}
			clock := &skewClock{}
			r := newCanaryRigWith(t, f, rigOpts{canary: CanaryConfig{Every: time.Nanosecond, Payload: testPayload(t)}, alerts: &alert.Config{}, now: clock.now})
			firing := func() []string {
				var out []string
				for _, a := range r.svc.alerts.Open() { // Firing is the loop goroutine's own view
					if a.Condition == alert.CanaryDrift {
						out = append(out, a.Labels["queue"]+"/"+a.Labels["agent"])
					}
				}
				return out
			}
			r.runCanaries(f, 10)
			time.Sleep(100 * time.Millisecond) // evaluations every 20 ms: pending, not firing
			if got := firing(); len(got) != 0 {
				t.Fatalf("fired before holding 15 minutes: %v", got)
			}
			clock.advance(15*time.Minute + time.Second)
			waitFor(t, "the canary_drift alarm of node2-gpu0", func() bool { return slices.Equal(firing(), []string{"nvidia-h100/node2-gpu0"}) })
			// The dashboard and the metrics say what the alarm says.
			if _, page := r.do("GET", "/dashboard", nil, testToken); !strings.Contains(agentRow(string(page), "node2-gpu0"), `<span class="drift">drift</span>`) {
				t.Errorf("the alarmed agent's dashboard row does not say drift:\n%s", agentRow(string(page), "node2-gpu0"))
			}
			if _, scrape := r.do("GET", "/metrics", nil, testToken); !strings.Contains(string(scrape), `kbgen_canary_drifting{agent="node2-gpu0",queue="nvidia-h100"} 1`) {
				t.Error("kbgen_canary_drifting of the alarmed agent is not 1")
			}
			r.runCanaries(f, len(slow))
			waitFor(t, "the alarm resolved", func() bool { return len(firing()) == 0 })
		})
	}
}

// agentRow is the dashboard's table row of agent ("" if none).
func agentRow(page, agent string) string {
	i := strings.Index(page, `data-agent="`+agent+`"`)
	if i < 0 {
		return ""
	}
	row := page[i:]
	return row[:strings.Index(row, "</tr>")]
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

// TestChangePointsOf: the change points of an agent's series are named by
// the run id of the quiet point that starts the new segment; noisy points
// are left out of the series, and only the last maxChangeWindow count.
func TestChangePointsOf(t *testing.T) {
	t.Parallel()
	var pts []canary.Point
	add := func(score float64, noisy bool) {
		pts = append(pts, canary.Point{RunID: fmt.Sprintf("c%d", len(pts)), Score: score, Noisy: noisy})
	}
	for i := range 30 {
		add(1000+float64(i%3), false)
		if i == 10 {
			add(5000, true) // c11: re-run, not part of the series
		}
	}
	for i := range 30 {
		add(1100+float64(i%3), false)
	}
	if got := changePointsOf(pts); len(got) != 1 || got[0] != "c31" {
		t.Errorf("change points %v, want [c31] (the first slow point; c11 is noisy)", got)
	}
	// A step older than the window is not looked at.
	for i := range maxChangeWindow {
		add(1100+float64(i%3), false)
	}
	if got := changePointsOf(pts); len(got) != 0 {
		t.Errorf("change points %v, want none within the last %d points", got, maxChangeWindow)
	}
}

// promtoolCheck has Prometheus' own linter read a scrape.
func promtoolCheck(t *testing.T, scrape []byte) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Log("SKIP promtool check: promtool is not installed (Debian: prometheus)")
		return
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(scrape)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
}
