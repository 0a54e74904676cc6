package alert

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// t0 is the tests' clock start: every time is t0 plus a duration, never
// the wall clock.
var t0 = time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

// receiver is a local stand-in for Slack or a JSON webhook: it records
// each request and answers with the status its script says (200 after
// the script runs out).
type receiver struct {
	srv    *httptest.Server
	mu     sync.Mutex
	got    []request
	script []int
}

type request struct {
	Delivery string
	Body     map[string]any
}

func newReceiver(t *testing.T, script ...int) *receiver {
	t.Helper()
	r := &receiver{script: script}
	r.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil || req.Method != http.MethodPost || req.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "invalid_payload", http.StatusBadRequest)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		r.got = append(r.got, request{req.Header.Get(DeliveryHeader), m})
		if len(r.script) > 0 {
			code := r.script[0]
			r.script = r.script[1:]
			if code == http.StatusTooManyRequests {
				w.Header().Set("Retry-After", "30")
			}
			if code != http.StatusOK {
				http.Error(w, "no_service", code)
				return
			}
		}
		_, _ = io.WriteString(w, "ok")
	}))
	t.Cleanup(r.srv.Close)
	return r
}

// texts is the text of every request received, in order.
func (r *receiver) texts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, g := range r.got {
		s, _ := g.Body["text"].(string)
		out = append(out, s)
	}
	return out
}

func (r *receiver) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.got)
}

// rig is an alerter with its ledger file and log.
type rig struct {
	a      *Alerter
	ledger Ledger
	log    []string
}

func newRig(t *testing.T, cfg Config, ledger Ledger) *rig {
	t.Helper()
	g := &rig{ledger: ledger}
	a, err := New(Options{Config: cfg, Rules: DefaultRules(), VendorOf: vendorOf, Ledger: ledger,
		Logf: func(f string, args ...any) { g.log = append(g.log, fmt.Sprintf(f, args...)) }})
	if err != nil {
		t.Fatal(err)
	}
	g.a = a
	return g
}

// tempLedger is a ledger for one test; a restart is a second rig on it.
// fleet/store's TestAlertLedger runs the store's through the same
// restart.
func tempLedger(*testing.T) Ledger { return NewMemoryLedger() }

func (g *rig) eval(t *testing.T, d time.Duration, f Facts) {
	t.Helper()
	if err := g.a.Evaluate(at(d), f); err != nil {
		t.Fatal(err)
	}
}

func (g *rig) flush(t *testing.T, d time.Duration) time.Time {
	t.Helper()
	next, err := g.a.Flush(context.Background(), at(d))
	if err != nil {
		t.Fatal(err)
	}
	return next
}

// vendorOf is the tests' registry: a queue's vendor is its first word.
func vendorOf(q string) string {
	for i, c := range q {
		if c == '-' {
			return q[:i]
		}
	}
	return q
}

func slackTo(name, url string) Receiver { return Receiver{Name: name, Kind: KindSlack, URL: url} }
func hookTo(name, url string) Receiver  { return Receiver{Name: name, Kind: KindWebhook, URL: url} }

// noAgents is facts in which each of queues has no agent, and the
// others (online) one.
func noAgents(queues []string, online ...string) Facts {
	f := Facts{AgentsKnown: true, BudgetKnown: true, Budget: Budget{Limit: 100, OrgRemaining: -1}}
	for _, q := range queues {
		f.Queues = append(f.Queues, Queue{Name: q})
	}
	for _, q := range online {
		f.Queues = append(f.Queues, Queue{Name: q, Online: 1})
	}
	return f
}
