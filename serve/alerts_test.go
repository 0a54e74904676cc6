package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/dashboard"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/registry"
)

// skewClock is the wall clock plus an offset a test moves forward: the
// alerts' durations pass without sleeping.
type skewClock struct{ off atomic.Int64 }

func (c *skewClock) now() time.Time          { return time.Now().Add(time.Duration(c.off.Load())) }
func (c *skewClock) advance(d time.Duration) { c.off.Add(int64(d)) }

// TestAlertsAgentLost: an agent.lost webhook puts the agent in the
// roster as lost; held for its 5 minutes it is a FIRING alarm on the
// configured webhook receiver and an open alert on the dashboard;
// agent.connected resolves it, with the same alarm id. Without a store
// the log says the ledger is in memory.
func TestAlertsAgentLost(t *testing.T) {
	const secret = "whsec-alerts"
	recv := newAlertReceiver(t, alert.AgentLost)
	clock := &skewClock{}
	r := newRig(t, rigOpts{secret: secret, view: testViewToken, alerts: recv.config(), now: clock.now})
	messages := func(n int) []alert.Payload { return recv.wait(t, n, r) }
	if code := r.signedHook(secret, []byte(`{"event": "agent.lost", "agent": {"name": "h100-1", "meta_data": ["queue=nvidia-h100"]}}`)); code != 200 {
		t.Fatalf("webhook: %d", code)
	}
	time.Sleep(100 * time.Millisecond) // a few evaluations: pending, not firing
	if got := recv.messages(); len(got) != 0 {
		t.Errorf("fired before holding 5 minutes: %+v", got)
	}
	clock.advance(5*time.Minute + time.Second)
	m := messages(1)
	if m[0].Status != alert.Firing || m[0].Alarm.Labels["agent"] != "h100-1" || m[0].Alarm.Labels["queue"] != "nvidia-h100" || m[0].Alarm.Labels["vendor"] != "NVIDIA" {
		t.Fatalf("first message %+v", m[0])
	}
	if _, body := r.do("GET", "/dashboard", nil, testViewToken); !strings.Contains(string(body), "agent h100-1 of queue nvidia-h100 is no longer connected") {
		t.Errorf("the dashboard shows no open alert:\n%s", body)
	}
	if code := r.signedHookAt(secret, []byte(`{"event": "agent.connected", "agent": {"name": "h100-1", "meta_data": ["queue=nvidia-h100"]}}`), clock.now()); code != 200 {
		t.Fatalf("webhook: %d", code)
	}
	m = messages(2)
	if m[1].Status != alert.Resolved || m[1].Alarm.ID != m[0].Alarm.ID || len(m) != 2 {
		t.Fatalf("messages %+v", m)
	}
	if !strings.Contains(r.log.String(), "alerts: 1 receivers, 1 routes, ledger in memory (no store") {
		t.Errorf("the log does not say the ledger is in memory:\n%s", r.log.String())
	}
}

// TestAlertFacts: the run facts and waits that feed the metrics feed the
// alerts too, and the facts name the registry's queues and the budget.
func TestAlertFacts(t *testing.T) {
	sc := fastScript
	sc.ResultInMetaData = true
	sc.Facts = &runfacts.Facts{Agent: "gpu-node-3-gpu0", Queue: "nvidia-h100", Node: "gpu-node-3", KbgenVersion: "v9.9.9", Noise: "noisy"}
	r := newRig(t, rigOpts{script: sc})
	r.submit("a1")
	if st := r.await("a1", 10*time.Second); st.Status != StatusObtained {
		t.Fatalf("a1: %+v", st)
	}
	f := r.svc.AlertFacts()
	i := slices.IndexFunc(f.Agents, func(a alert.Agent) bool { return a.Name == "gpu-node-3-gpu0" })
	if i < 0 {
		t.Fatalf("agents %+v: want gpu-node-3-gpu0 from the run's facts", f.Agents)
	}
	if a := f.Agents[i]; a.Runs != 1 || a.Noisy != 1 || a.Faults != 0 || a.Node != "gpu-node-3" || a.Kbgen != "v9.9.9" {
		t.Errorf("agent %+v: want 1 run, noisy, exit 0 (the stand-in's), on gpu-node-3 with v9.9.9", a)
	}
	q := slices.IndexFunc(f.Queues, func(q alert.Queue) bool { return q.Name == "nvidia-h100" })
	if q < 0 || !f.Queues[q].WaitKnown {
		t.Errorf("queues %+v: want nvidia-h100 with its wait", f.Queues)
	}
	if !f.BudgetKnown || f.Budget.Limit != 6000 || f.Generator == "" {
		t.Errorf("budget %+v known=%v generator %q: want the rig's 6000 and kbgen's version", f.Budget, f.BudgetKnown, f.Generator)
	}
}

// TestVendorOf: a queue's vendor is the registry's donor, its aliases'
// too; an unknown queue has none.
func TestVendorOf(t *testing.T) {
	t.Parallel()
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	v := VendorOf(reg)
	for q, want := range map[string]string{"nvidia-h100": "NVIDIA", "h100": "NVIDIA", "no-such-queue": ""} {
		if got := v(q); got != want {
			t.Errorf("VendorOf(%q) = %q, want %q", q, got, want)
		}
	}
}

// TestOpenAlertsScope: the dashboard shows a vendor's token its queues'
// open alarms only; an alarm of no queue (the API budget) only to the
// whole fleet's scope.
func TestOpenAlertsScope(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)
	firing := func(cond string, labels map[string]string) alert.Alarm {
		return alert.Alarm{ID: alert.AlarmID(cond, labels), Condition: cond, Labels: labels, Summary: cond, Since: since, FiredAt: since}
	}
	ledger := alert.NewMemoryLedger()
	if err := ledger.Save([]alert.Alarm{
		firing(alert.QueueNoAgents, map[string]string{"queue": "amd-mi300x"}),
		firing(alert.AgentLost, map[string]string{"queue": "nvidia-h100", "agent": "a"}),
		firing(alert.BudgetExhausted, map[string]string{}),
	}, nil, time.Time{}); err != nil {
		t.Fatal(err)
	}
	a, err := alert.New(alert.Options{Rules: alert.DefaultRules(), Ledger: ledger})
	if err != nil {
		t.Fatal(err)
	}
	s := &Service{alerts: a}
	for _, tc := range []struct {
		name  string
		scope dashboard.Scope
		want  []string
	}{
		{"whole fleet", dashboard.Scope{}, []string{alert.AgentLost, alert.BudgetExhausted, alert.QueueNoAgents}},
		{"AMD", dashboard.Scope{Name: "amd", Queues: []string{"amd-mi300x"}}, []string{alert.QueueNoAgents}},
		{"a vendor without queues", dashboard.Scope{Name: "x", Queues: []string{}}, nil},
	} {
		var got []string
		for _, x := range s.openAlerts(tc.scope) {
			got = append(got, x.Name)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: open alerts %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestAlertsImageNotPrepulled: a run whose facts say the node's docker
// lacked the queue's image is, held for its 15 minutes, a FIRING
// image_not_prepulled alarm naming node, queue and image; a later run on
// that node whose facts say the image is pulled resolves it, under the
// same alarm id.
func TestAlertsImageNotPrepulled(t *testing.T) {
	recv := newAlertReceiver(t, alert.ImageNotPrepulled)
	clock := &skewClock{}
	missing, pulled := false, true
	script := func(p *bool) fakebuildkite.Script {
		sc := fastScript
		sc.ResultInMetaData = true
		sc.Facts = &runfacts.Facts{Agent: "gpu-node-3-gpu0", Queue: "nvidia-h100", Node: "gpu-node-3", ImageDigest: "sha256:ab", ImagePulled: p}
		return sc
	}
	r := newRig(t, rigOpts{script: script(&missing), alerts: recv.config(), now: clock.now})
	messages := func(n int) []alert.Payload { return recv.wait(t, n, r) }
	r.submit("a1")
	if st := r.await("a1", 10*time.Second); st.Status != StatusObtained {
		t.Fatalf("a1: %+v", st)
	}
	time.Sleep(100 * time.Millisecond) // a few evaluations: pending, not firing
	if got := recv.messages(); len(got) != 0 {
		t.Errorf("fired before holding 15 minutes: %+v", got)
	}
	clock.advance(15*time.Minute + time.Second)
	m := messages(1)
	if l := m[0].Alarm.Labels; m[0].Status != alert.Firing || l["node"] != "gpu-node-3" || l["queue"] != "nvidia-h100" || l["image"] != "sha256:ab" {
		t.Fatalf("first message %+v", m[0])
	}
	r.fake.SetScript(script(&pulled))
	r.submit("a2")
	if st := r.await("a2", 10*time.Second); st.Status != StatusObtained {
		t.Fatalf("a2: %+v", st)
	}
	m = messages(2)
	if m[1].Status != alert.Resolved || m[1].Alarm.ID != m[0].Alarm.ID || len(m) != 2 {
		t.Fatalf("messages %+v", m)
	}
}

// alertReceiver is a generic JSON webhook receiver (alert.KindWebhook)
// that keeps the messages of one condition.
type alertReceiver struct {
	cond string
	srv  *httptest.Server
	mu   sync.Mutex
	got  []alert.Payload
}

func newAlertReceiver(t *testing.T, cond string) *alertReceiver {
	t.Helper()
	a := &alertReceiver{cond: cond}
	a.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m alert.Payload
		_ = json.Unmarshal(b, &m)
		a.mu.Lock()
		defer a.mu.Unlock()
		if m.Alarm.Condition == a.cond {
			a.got = append(a.got, m)
		}
	}))
	t.Cleanup(a.srv.Close)
	return a
}

// config routes every alarm to the receiver.
func (a *alertReceiver) config() *alert.Config {
	return &alert.Config{Receivers: []alert.Receiver{{Name: "ops", Kind: alert.KindWebhook, URL: a.srv.URL}}, Routes: []alert.Route{{Receivers: []string{"ops"}}}}
}

// messages is what the receiver got so far.
func (a *alertReceiver) messages() []alert.Payload {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.got)
}

// wait is the receiver's messages once it has at least n, waiting up to
// 10 s; it fails the test with r's log otherwise.
func (a *alertReceiver) wait(t *testing.T, n int, r *rig) []alert.Payload {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if out := a.messages(); len(out) >= n {
			return out
		}
	}
	t.Fatalf("the receiver got fewer than %d %s messages; log:\n%s", n, a.cond, r.log.String())
	return nil
}
