package alert

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
)

// TestFireAndResolve: a queue without agents fires after its 10 minutes,
// once, and resolves when an agent connects, under the same alarm id.
func TestFireAndResolve(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	g := newRig(t, Config{Receivers: []Receiver{slackTo("s", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"s"}}}}, tempLedger(t))
	for _, d := range []time.Duration{0, 5 * time.Minute, 9*time.Minute + 59*time.Second} {
		g.eval(t, d, noAgents([]string{"nvidia-h100"}))
		g.flush(t, d)
	}
	if n := rc.count(); n != 0 {
		t.Fatalf("%d messages before the condition held 10 minutes, want 0", n)
	}
	for _, d := range []time.Duration{10 * time.Minute, 11 * time.Minute} {
		g.eval(t, d, noAgents([]string{"nvidia-h100"}))
		g.flush(t, d)
	}
	g.eval(t, 12*time.Minute, noAgents(nil, "nvidia-h100"))
	g.flush(t, 12*time.Minute)
	got := rc.texts()
	if len(got) != 2 || !strings.HasPrefix(got[0], "FIRING queue_no_agents: queue nvidia-h100 has no connected agent") || !strings.HasPrefix(got[1], "RESOLVED queue_no_agents:") {
		t.Fatalf("messages:\n%s\nwant one FIRING then one RESOLVED", strings.Join(got, "\n"))
	}
	id := AlarmID(QueueNoAgents, map[string]string{"queue": "nvidia-h100", "vendor": "nvidia"})
	for _, m := range got {
		if !strings.HasSuffix(m, "[alarm "+id+"]") {
			t.Errorf("message %q does not end with alarm id %s", m, id)
		}
	}
	if !strings.Contains(got[1], "held 12m0s") {
		t.Errorf("resolved message %q does not say how long it held", got[1])
	}
	if len(g.a.Firing()) != 0 || len(g.a.Pending()) != 0 {
		t.Errorf("after resolving: %d firing, %d pending; want none", len(g.a.Firing()), len(g.a.Pending()))
	}
}

// TestUnknownIsNotAllClear: a snapshot without the queue view (serve just
// restarted) neither resolves a firing alarm nor fires a new one.
func TestUnknownIsNotAllClear(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	g := newRig(t, Config{Receivers: []Receiver{hookTo("h", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"h"}}}}, tempLedger(t))
	g.eval(t, 0, noAgents([]string{"q"}))
	g.eval(t, 10*time.Minute, noAgents([]string{"q"}))
	unknown := noAgents(nil)
	unknown.AgentsKnown = false
	g.eval(t, 11*time.Minute, unknown)
	g.flush(t, 11*time.Minute)
	if got := rc.texts(); len(got) != 1 || !strings.HasPrefix(got[0], "FIRING") {
		t.Fatalf("messages %q, want the one FIRING only", got)
	}
	if len(g.a.Firing()) != 1 {
		t.Errorf("%d alarms firing, want 1 (unknown is not resolved)", len(g.a.Firing()))
	}
}

// TestSlackRateLimit: three alarms to one Slack webhook go one a second
// (https://api.slack.com/apis/rate-limits#incoming-webhooks), in order;
// a generic webhook beside it gets all three at once.
func TestSlackRateLimit(t *testing.T) {
	t.Parallel()
	slack, hook := newReceiver(t), newReceiver(t)
	g := newRig(t, Config{Receivers: []Receiver{slackTo("s", slack.srv.URL), hookTo("h", hook.srv.URL)},
		Routes: []Route{{Receivers: []string{"s", "h"}}}}, tempLedger(t))
	g.a.eval.Rules.For = map[string]time.Duration{}
	g.eval(t, 0, noAgents([]string{"q-a", "q-b", "q-c"}))
	for _, tc := range []struct {
		at        time.Duration
		slack     int
		nextDueIn time.Duration
	}{
		{0, 1, time.Second},
		{500 * time.Millisecond, 1, 500 * time.Millisecond},
		{999 * time.Millisecond, 1, time.Millisecond},
		{time.Second, 2, time.Second},
		{1500 * time.Millisecond, 2, 500 * time.Millisecond},
		{2 * time.Second, 3, -1},
	} {
		next := g.flush(t, tc.at)
		if n := slack.count(); n != tc.slack {
			t.Errorf("at +%s: Slack got %d messages, want %d", tc.at, n, tc.slack)
		}
		if tc.nextDueIn < 0 && !next.IsZero() || tc.nextDueIn >= 0 && !next.Equal(at(tc.at+tc.nextDueIn)) {
			t.Errorf("at +%s: next due %s, want +%s", tc.at, next, tc.nextDueIn)
		}
	}
	if hook.count() != 3 {
		t.Errorf("webhook got %d, want 3 at once", hook.count())
	}
	got := slack.texts()
	for i, q := range []string{"q-a", "q-b", "q-c"} {
		if i >= len(got) || !strings.Contains(got[i], "queue "+q+" ") {
			t.Errorf("Slack message %d is %q, want queue %s's (in order)", i, got, q)
		}
	}
}

// TestRestartWithLedger: killed with one message sent and one pending,
// a new alerter on the same ledger sends the pending one only, does not
// fire the firing alarms again, and resolves them later.
func TestRestartWithLedger(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	cfg := Config{Receivers: []Receiver{slackTo("s", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"s"}}}}
	ledger := tempLedger(t)
	first := newRig(t, cfg, ledger)
	first.eval(t, 0, noAgents([]string{"q-a", "q-b"}))
	first.eval(t, 10*time.Minute, noAgents([]string{"q-a", "q-b"}))
	first.flush(t, 10*time.Minute) // one sent; Slack's interval holds the other
	if rc.count() != 1 || len(first.a.Pending()) != 1 {
		t.Fatalf("before the restart: %d sent, %d pending; want 1 and 1", rc.count(), len(first.a.Pending()))
	}

	second := newRig(t, cfg, ledger)
	if p := second.a.Pending(); len(p) != 1 || !strings.Contains(p[0].Transition.Alarm.Summary, "q-b") {
		t.Fatalf("after the restart pending %+v, want q-b's FIRING", p)
	}
	if n := len(second.a.Firing()); n != 2 {
		t.Fatalf("after the restart %d alarms firing, want 2", n)
	}
	second.eval(t, 11*time.Minute, noAgents([]string{"q-a", "q-b"}))
	second.flush(t, 11*time.Minute)
	second.flush(t, 12*time.Minute)
	second.eval(t, 13*time.Minute, noAgents(nil, "q-a", "q-b"))
	second.flush(t, 13*time.Minute)
	second.flush(t, 14*time.Minute)

	var ids []string
	for _, r := range rc.got {
		ids = append(ids, r.Delivery)
	}
	want := []string{"FIRING queue_no_agents: queue q-a", "FIRING queue_no_agents: queue q-b", "RESOLVED queue_no_agents: queue q-a", "RESOLVED queue_no_agents: queue q-b"}
	got := rc.texts()
	if len(got) != len(want) {
		t.Fatalf("messages:\n%s\nwant %d: no loss, no repeat", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.HasPrefix(got[i], want[i]) {
			t.Errorf("message %d %q, want %s…", i, got[i], want[i])
		}
	}
	if slices.Sort(ids); len(slices.Compact(ids)) != len(want) {
		t.Errorf("delivery ids %q repeat", ids)
	}
}

// TestRouting: each receiver gets its vendor's or queue's alarms; a
// route without a matcher gets everything, the API budget too.
func TestRouting(t *testing.T) {
	t.Parallel()
	nv, amd, all := newReceiver(t), newReceiver(t), newReceiver(t)
	cfg := Config{
		Receivers: []Receiver{hookTo("nvidia", nv.srv.URL), hookTo("amd", amd.srv.URL), hookTo("all", all.srv.URL)},
		Routes: []Route{
			{Vendors: []string{"nvidia"}, Receivers: []string{"nvidia"}},
			{Queues: []string{"amd-mi300"}, Receivers: []string{"amd"}},
			{Vendors: []string{"amd"}, Queues: []string{"amd-mi250"}, Receivers: []string{"amd"}},
			{Receivers: []string{"all"}},
		},
	}
	g := newRig(t, cfg, tempLedger(t))
	g.a.eval.Rules.For = map[string]time.Duration{}
	f := noAgents([]string{"nvidia-h100", "nvidia-b200", "amd-mi300", "amd-mi325"})
	f.Budget.Used = 100
	g.eval(t, 0, f)
	g.flush(t, 0)
	queuesOf := func(r *receiver) []string {
		var out []string
		for _, rq := range r.got {
			a, _ := rq.Body["alarm"].(map[string]any)
			l, _ := a["labels"].(map[string]any)
			q, _ := l["queue"].(string)
			out = append(out, a["condition"].(string)+":"+q)
		}
		slices.Sort(out)
		return out
	}
	for _, tc := range []struct {
		name string
		r    *receiver
		want []string
	}{
		{"nvidia vendor", nv, []string{"queue_no_agents:nvidia-b200", "queue_no_agents:nvidia-h100"}},
		{"amd queue", amd, []string{"queue_no_agents:amd-mi300"}},
		{"catch-all", all, []string{"api_budget_exhausted:", "queue_no_agents:amd-mi300", "queue_no_agents:amd-mi325", "queue_no_agents:nvidia-b200", "queue_no_agents:nvidia-h100"}},
	} {
		if got := queuesOf(tc.r); !slices.Equal(got, tc.want) {
			t.Errorf("%s: got %q, want %q", tc.name, got, tc.want)
		}
	}
}

// TestReceiverDownThenUp: a receiver answering 503 is retried after
// 1 s, then 2 s, and the message arrives once when it is back; one that
// refuses connections is retried too, and the log never shows its URL.
func TestReceiverDownThenUp(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, http.StatusServiceUnavailable, http.StatusServiceUnavailable)
	g := newRig(t, Config{Receivers: []Receiver{hookTo("h", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"h"}}}}, tempLedger(t))
	g.a.eval.Rules.For = map[string]time.Duration{}
	g.eval(t, 0, noAgents([]string{"q"}))
	for _, tc := range []struct {
		at       time.Duration
		requests int
		pending  int
	}{
		{0, 1, 1},
		{999 * time.Millisecond, 1, 1},
		{time.Second, 2, 1},
		{2999 * time.Millisecond, 2, 1},
		{3 * time.Second, 3, 0},
		{time.Minute, 3, 0},
	} {
		g.flush(t, tc.at)
		if rc.count() != tc.requests || len(g.a.Pending()) != tc.pending {
			t.Errorf("at +%s: %d requests, %d pending; want %d and %d", tc.at, rc.count(), len(g.a.Pending()), tc.requests, tc.pending)
		}
	}
	if len(g.log) != 2 || !strings.Contains(g.log[0], "HTTP 503") {
		t.Errorf("log %q, want two failed attempts with their status", g.log)
	}
}

// TestConnectionRefusedKeepsURLSecret: a Slack URL's path is its
// credential; a failed connection's log line must not carry it.
func TestConnectionRefusedKeepsURLSecret(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	url := rc.srv.URL + "/services/T000/B000/SECRETxyz"
	rc.srv.Close()
	g := newRig(t, Config{Receivers: []Receiver{slackTo("s", url)}, Routes: []Route{{Receivers: []string{"s"}}}}, tempLedger(t))
	g.a.eval.Rules.For = map[string]time.Duration{}
	g.eval(t, 0, noAgents([]string{"q"}))
	g.flush(t, 0)
	if len(g.a.Pending()) != 1 || len(g.log) != 1 {
		t.Fatalf("pending %d, log %q; want the delivery kept and one line", len(g.a.Pending()), g.log)
	}
	if strings.Contains(g.log[0], "SECRET") || !strings.Contains(g.log[0], "receiver s") {
		t.Errorf("log line %q: want the receiver's name and no URL", g.log[0])
	}
}

// TestPermanentRefusal: a 4xx (Slack's invalid_payload, a deleted
// webhook's 404) is not retried and does not hold the queue behind it.
func TestPermanentRefusal(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, http.StatusNotFound)
	g := newRig(t, Config{Receivers: []Receiver{hookTo("h", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"h"}}}}, tempLedger(t))
	g.a.eval.Rules.For = map[string]time.Duration{}
	g.eval(t, 0, noAgents([]string{"q-a", "q-b"}))
	g.flush(t, 0)
	g.flush(t, time.Hour)
	if rc.count() != 2 || len(g.a.Pending()) != 0 {
		t.Errorf("%d requests, %d pending; want 2 (the refused one not retried) and 0", rc.count(), len(g.a.Pending()))
	}
	st, err := g.ledger.Load()
	if err != nil || len(st.Deliveries) != 2 || !strings.Contains(st.Deliveries[0].Refused, "404") {
		t.Errorf("ledger %+v (%v), want the refusal kept", st.Deliveries, err)
	}
}

// TestDroppedReceiver: a pending delivery for a receiver the new config
// lacks is not sent, and is logged.
func TestDroppedReceiver(t *testing.T) {
	t.Parallel()
	down := newReceiver(t, http.StatusServiceUnavailable)
	ledger := tempLedger(t)
	g := newRig(t, Config{Receivers: []Receiver{hookTo("old", down.srv.URL)}, Routes: []Route{{Receivers: []string{"old"}}}}, ledger)
	g.a.eval.Rules.For = map[string]time.Duration{}
	g.eval(t, 0, noAgents([]string{"q"}))
	g.flush(t, 0)
	rc := newReceiver(t)
	g2 := newRig(t, Config{Receivers: []Receiver{hookTo("new", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"new"}}}}, ledger)
	g2.flush(t, time.Minute)
	if rc.count() != 0 || len(g2.a.Pending()) != 0 || len(g2.log) != 1 {
		t.Errorf("new receiver got %d, %d pending, log %q; want 0, 0 and one line", rc.count(), len(g2.a.Pending()), g2.log)
	}
}

// TestRetryAfter: a 429's Retry-After (30 s) holds the receiver longer
// than the backoff (1 s) would.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t, http.StatusTooManyRequests)
	g := newRig(t, Config{Receivers: []Receiver{slackTo("s", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"s"}}}}, tempLedger(t))
	g.a.eval.Rules.For = map[string]time.Duration{}
	g.eval(t, 0, noAgents([]string{"q"}))
	if next := g.flush(t, 0); !next.Equal(at(30 * time.Second)) {
		t.Errorf("after a 429 with Retry-After: 30, next due %s, want +30s", next)
	}
	g.flush(t, 29*time.Second)
	g.flush(t, 30*time.Second)
	if rc.count() != 2 || len(g.a.Pending()) != 0 {
		t.Errorf("%d requests, %d pending; want 2 (none before +30s) and 0", rc.count(), len(g.a.Pending()))
	}
}

// TestRun: the loop evaluates its source and delivers without being
// asked, and stops with its context.
func TestRun(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	g := newRig(t, Config{Receivers: []Receiver{hookTo("h", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"h"}}}}, tempLedger(t))
	g.a.eval.Rules.For = map[string]time.Duration{}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.a.Run(ctx, 20*time.Millisecond, time.Now, func() Facts { return noAgents([]string{"q"}) })
	}()
	deadline := time.Now().Add(10 * time.Second)
	for rc.count() == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
	if got := rc.texts(); len(got) != 1 || !strings.HasPrefix(got[0], "FIRING queue_no_agents") {
		t.Errorf("Run delivered %q, want the one FIRING", got)
	}
}

// TestRefusedResentAfterRestart: a receiver answering 500 keeps its
// message pending while another receiver of the same alarm gets it; a
// new alerter on the same ledger (a restart) sends the kept one once the
// receiver is back, fires nothing again, and repeats nothing delivered.
func TestRefusedResentAfterRestart(t *testing.T) {
	t.Parallel()
	ops, amd := newReceiver(t, http.StatusInternalServerError), newReceiver(t)
	cfg := Config{Receivers: []Receiver{slackTo("ops", ops.srv.URL), hookTo("amd", amd.srv.URL)},
		Routes: []Route{{Receivers: []string{"ops"}}, {Queues: []string{"amd-mi300"}, Receivers: []string{"amd"}}}}
	ledger := tempLedger(t)
	first := newRig(t, cfg, ledger)
	first.eval(t, 0, noAgents([]string{"amd-mi300"}))
	first.eval(t, 10*time.Minute, noAgents([]string{"amd-mi300"}))
	first.flush(t, 10*time.Minute)
	if ops.count() != 1 || amd.count() != 1 || len(first.a.Pending()) != 1 || first.a.Pending()[0].Receiver != "ops" {
		t.Fatalf("before the restart: ops %d, amd %d requests, pending %+v; want 1, 1 and ops' message", ops.count(), amd.count(), first.a.Pending())
	}
	second := newRig(t, cfg, ledger)
	second.eval(t, 11*time.Minute, noAgents([]string{"amd-mi300"})) // still no agent: no second FIRING
	second.flush(t, 11*time.Minute)
	second.flush(t, 12*time.Minute)
	if ops.count() != 2 || amd.count() != 1 || len(second.a.Pending()) != 0 {
		t.Fatalf("after the restart: ops %d, amd %d requests, %d pending; want 2 (the refused one resent), 1 (no repeat), 0", ops.count(), amd.count(), len(second.a.Pending()))
	}
	if got := ops.texts(); !strings.HasPrefix(got[1], "FIRING queue_no_agents") {
		t.Errorf("ops got %q, want the FIRING resent", got)
	}
}

// fixedCanaries is a CanarySource that says what it was given.
type fixedCanaries struct {
	latest []Canary
	known  bool
}

func (f fixedCanaries) Canaries(time.Time) ([]Canary, bool) { return f.latest, f.known }

// TestCanarySource: the canary_drift condition reads Options.Canaries;
// with none wired, or a source that knows nothing yet, it says nothing.
func TestCanarySource(t *testing.T) {
	t.Parallel()
	drifting := []Canary{{Queue: "nvidia-h100", Agent: "gpu-node-1-gpu0", Drifting: true, Drift: 0.08}}
	for _, tc := range []struct {
		name   string
		source CanarySource
		firing int
	}{
		{"none wired", nil, 0},
		{"nothing known yet", fixedCanaries{drifting, false}, 0},
		{"the canary rule says drift", fixedCanaries{drifting, true}, 1},
		{"the canary rule says ok", fixedCanaries{[]Canary{{Queue: "nvidia-h100", Agent: "a", Drift: 0.01, Offset: -0.02}}, true}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a, err := New(Options{Rules: DefaultRules(), Ledger: NewMemoryLedger(), Canaries: tc.source})
			if err != nil {
				t.Fatal(err)
			}
			healthy := noAgents(nil, "nvidia-h100")
			for _, d := range []time.Duration{0, 15 * time.Minute} {
				if err := a.Evaluate(at(d), healthy); err != nil {
					t.Fatal(err)
				}
			}
			got := a.Open()
			if len(got) != tc.firing || tc.firing == 1 && (got[0].Condition != CanaryDrift || got[0].Labels["agent"] != "gpu-node-1-gpu0") {
				t.Errorf("open alarms %+v, want %d canary_drift", got, tc.firing)
			}
		})
	}
}

// TestImageNotPrepulled: a node whose run facts say its docker lacked the
// queue's image fires after the condition's 15 minutes, from what Recent
// kept (the report is older than Window by then), and resolves when a
// later run on that node reports the image pulled; a run that could not
// tell (ImagePulled nil) changes nothing.
func TestImageNotPrepulled(t *testing.T) {
	t.Parallel()
	rc := newReceiver(t)
	g := newRig(t, Config{Receivers: []Receiver{slackTo("s", rc.srv.URL)}, Routes: []Route{{Receivers: []string{"s"}}}}, tempLedger(t))
	r := NewRecent()
	missing, pulled := false, true
	run := func(d time.Duration, p *bool) {
		r.Run(at(d), runfacts.Facts{Agent: "a1", Queue: "nvidia-h100", Node: "n1", ImageDigest: "sha256:ab", ImagePulled: p})
	}
	step := func(d time.Duration) {
		g.eval(t, d, r.Facts(at(d), View{Known: true}))
		g.flush(t, d)
	}
	run(0, &missing)
	for _, d := range []time.Duration{0, 10 * time.Minute, 14*time.Minute + 59*time.Second} {
		step(d)
	}
	if n := rc.count(); n != 0 {
		t.Fatalf("%d messages before the condition held 15 minutes, want 0", n)
	}
	step(15 * time.Minute)
	run(16*time.Minute, nil)
	step(16 * time.Minute)
	run(17*time.Minute, &pulled)
	step(17 * time.Minute)
	got := rc.texts()
	if len(got) != 2 || !strings.HasPrefix(got[0], "FIRING image_not_prepulled: node n1 of queue nvidia-h100 has not pulled sha256:ab") ||
		!strings.HasPrefix(got[1], "RESOLVED image_not_prepulled:") {
		t.Fatalf("messages:\n%s\nwant one FIRING then one RESOLVED", strings.Join(got, "\n"))
	}
}
