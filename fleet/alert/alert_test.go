package alert

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// receiver is a local channel: what it got, when, and a status to answer.
type receiver struct {
	mu     sync.Mutex
	got    []map[string]any
	keys   []string
	at     []time.Time
	status int
	srv    *httptest.Server
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{status: 200}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.status != 200 {
			w.WriteHeader(r.status)
			return
		}
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		r.got, r.keys, r.at = append(r.got, m), append(r.keys, req.Header.Get("Idempotency-Key")), append(r.at, time.Now())
	}))
	t.Cleanup(r.srv.Close)
	return r
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

func (r *receiver) waitFor(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); r.count() < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("receiver got %d messages, want %d", r.count(), n)
		}
	}
}

func config(ops, amd string) Config {
	return Config{
		Channels: []Channel{{Name: "ops", Kind: Slack, URL: ops}, {Name: "amd", Kind: Webhook, URL: amd}},
		Routes:   []Route{{Channel: "ops"}, {Channel: "amd", Queues: []string{"amd-mi300"}}},
		Rules:    Rules{For: Duration(5 * time.Minute)},
	}
}

func run(t *testing.T, e *Engine, interval time.Duration) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { (&Sender{Engine: e, Interval: interval}).Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

// TestFiringRoutedAndResolved: a condition fires only after holding for
// Rules.For, goes to the fleet's channel and, for its vendor's queue, to
// the vendor's, and resolves with the same alarm id.
func TestFiringRoutedAndResolved(t *testing.T) {
	t.Parallel()
	ops, amd := newReceiver(t), newReceiver(t)
	e, err := NewEngine(config(ops.srv.URL, amd.srv.URL), NewMemoryLedger())
	if err != nil {
		t.Fatal(err)
	}
	run(t, e, 10*time.Millisecond)
	stuck := []Condition{{ID: "queue_stuck/amd-mi300", Name: "queue stuck", Queue: "amd-mi300", Summary: "oldest job 12m <b>"}}
	for _, d := range []time.Duration{0, 4 * time.Minute} {
		if err := e.Evaluate(stuck, t0.Add(d)); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond)
	if ops.count() != 0 || len(e.Open()) != 0 {
		t.Fatalf("fired before holding 5 minutes: %d messages", ops.count())
	}
	if err := e.Evaluate(stuck, t0.Add(5*time.Minute)); err != nil {
		t.Fatal(err)
	}
	ops.waitFor(t, 1)
	amd.waitFor(t, 1)
	if text, _ := ops.got[0]["text"].(string); !strings.Contains(text, "[FIRING] queue stuck") || !strings.Contains(text, "&lt;b&gt;") || strings.Contains(text, "<b>") {
		t.Errorf("Slack text %q", text)
	}
	if amd.got[0]["status"] != StatusFiring || amd.got[0]["alarm_id"] != "queue_stuck/amd-mi300" {
		t.Errorf("webhook body %v", amd.got[0])
	}
	// A condition of another queue goes to the fleet's channel only.
	h100 := Condition{ID: "agent_lost/h100-0", Name: "agent lost", Queue: "nvidia-h100", Summary: "h100-0"}
	_ = e.Evaluate(append(stuck, h100), t0.Add(6*time.Minute))
	_ = e.Evaluate(append(stuck, h100), t0.Add(11*time.Minute))
	ops.waitFor(t, 2)
	_ = e.Evaluate(nil, t0.Add(12*time.Minute))
	ops.waitFor(t, 4)
	amd.waitFor(t, 2)
	time.Sleep(100 * time.Millisecond)
	if amd.count() != 2 || amd.got[1]["status"] != StatusResolved || amd.got[1]["alarm_id"] != "queue_stuck/amd-mi300" {
		t.Errorf("the vendor's channel got %v", amd.got)
	}
	if len(e.Open()) != 0 {
		t.Errorf("open alarms after all resolved: %v", e.Open())
	}
}

// TestOneMessageASecond: three alarms firing at once reach one channel at
// least Interval apart.
func TestOneMessageASecond(t *testing.T) {
	t.Parallel()
	ops, amd := newReceiver(t), newReceiver(t)
	e, _ := NewEngine(config(ops.srv.URL, amd.srv.URL), NewMemoryLedger())
	run(t, e, DefaultInterval)
	var cs []Condition
	for _, q := range []string{"a", "b", "c"} {
		cs = append(cs, Condition{ID: "queue_stuck/" + q, Name: "queue stuck", Queue: q})
	}
	_ = e.Evaluate(cs, t0)
	_ = e.Evaluate(cs, t0.Add(5*time.Minute))
	ops.waitFor(t, 3)
	for i := 1; i < 3; i++ {
		if gap := ops.at[i].Sub(ops.at[i-1]); gap < 950*time.Millisecond {
			t.Errorf("messages %d and %d %s apart, want at least 1 s", i-1, i, gap)
		}
	}
}

// TestLedgerAcrossRestart: a message the channel refused is kept and sent
// by the next service; a firing alarm is not fired again after a restart;
// a delivered message is never sent twice.
func TestLedgerAcrossRestart(t *testing.T) {
	t.Parallel()
	ops, amd := newReceiver(t), newReceiver(t)
	ops.status = 500
	ledger := NewMemoryLedger()
	cfg := config(ops.srv.URL, amd.srv.URL)
	stuck := []Condition{{ID: "queue_stuck/amd-mi300", Name: "queue stuck", Queue: "amd-mi300"}}
	ctx, cancel := context.WithCancel(context.Background())
	e1, _ := NewEngine(cfg, ledger)
	done := make(chan struct{})
	go func() { (&Sender{Engine: e1, Interval: 10 * time.Millisecond}).Run(ctx); close(done) }()
	_ = e1.Evaluate(stuck, t0)
	_ = e1.Evaluate(stuck, t0.Add(5*time.Minute))
	amd.waitFor(t, 1) // delivered to the vendor; the fleet's channel refuses
	time.Sleep(100 * time.Millisecond)
	cancel()
	<-done
	if p, _ := ledger.Pending(); len(p) != 1 || p[0].Channel != "ops" {
		t.Fatalf("pending after the restart: %+v, want the refused ops message", p)
	}
	ops.mu.Lock()
	ops.status = 200
	ops.mu.Unlock()
	e2, err := NewEngine(cfg, ledger)
	if err != nil {
		t.Fatal(err)
	}
	run(t, e2, 10*time.Millisecond)
	_ = e2.Evaluate(stuck, t0.Add(6*time.Minute)) // still stuck: no second FIRING
	ops.waitFor(t, 1)
	time.Sleep(200 * time.Millisecond)
	if ops.count() != 1 || amd.count() != 1 {
		t.Fatalf("after the restart: ops got %d, amd %d; want 1 each (no repeat)", ops.count(), amd.count())
	}
	if ops.keys[0] != amd.keys[0] || ops.keys[0] == "" {
		t.Errorf("idempotency keys %q %q, want one key for one message", ops.keys[0], amd.keys[0])
	}
}

func TestLoadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, in, want string }{
		{"good", `{"channels": [{"name": "ops", "kind": "slack", "url": "https://hooks.slack.com/services/x"}], "routes": [{"channel": "ops"}], "rules": {"for": "2m"}}`, ""},
		{"unknown kind", `{"channels": [{"name": "ops", "kind": "pager", "url": "https://x"}]}`, "neither"},
		{"bad url", `{"channels": [{"name": "ops", "kind": "slack", "url": "file:///etc/passwd"}]}`, "http(s)"},
		{"route to nothing", `{"channels": [], "routes": [{"channel": "ops"}]}`, "not defined"},
		{"bad duration", `{"rules": {"for": "soon"}}`, "duration"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c, err := LoadConfig(strings.NewReader(tc.in))
			if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
			if err == nil && (time.Duration(c.Rules.For) != 2*time.Minute || c.Rules.FaultsPerHour != DefaultFaultsPerHour) {
				t.Errorf("rules %+v", c.Rules)
			}
		})
	}
}
