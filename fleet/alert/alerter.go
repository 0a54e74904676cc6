package alert

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"time"
)

// SlackInterval is the least time between two messages to one Slack
// incoming webhook: Slack allows one a second per webhook, with short
// bursts (https://api.slack.com/apis/rate-limits#incoming-webhooks,
// https://api.slack.com/docs/rate-limits). Generic webhooks get
// WebhookInterval.
const (
	SlackInterval   = time.Second
	WebhookInterval = 0
)

// Backoff bounds: a failed delivery waits 1s, 2s, 4s… at most MaxBackoff
// (or the receiver's Retry-After, when longer).
const (
	FirstBackoff = time.Second
	MaxBackoff   = 5 * time.Minute
)

// KeepSent is how long a sent or refused delivery stays in the ledger.
const KeepSent = 7 * 24 * time.Hour

// Options are an Alerter's parts.
type Options struct {
	Config   Config
	Rules    Rules
	VendorOf func(queue string) string
	Ledger   Ledger
	Client   *http.Client // default: a client with a 10 s timeout
	// Logf gets one line per failed or refused delivery; never a URL.
	Logf func(format string, args ...any)
	// Canaries feeds the canary_drift condition (kbgen serve passes its
	// canaries' verdicts, serve/alerts.go); nil: not known, the condition
	// says nothing.
	Canaries CanarySource
}

// CanarySource is the canary_drift condition's input: the latest canary
// measurement per agent, and whether there is any (false: not known, so
// the condition neither fires nor resolves). fleet/canary judges the
// calibration times (drift against an agent's own baseline, offset
// against its peers); a source built on it gives its relative change
// and offset here.
type CanarySource interface {
	Canaries(now time.Time) (latest []Canary, known bool)
}

// Alerter evaluates facts, keeps the ledger and delivers. One goroutine
// uses it (Run, or a test calling Evaluate and Flush); Open is safe from
// any goroutine.
type Alerter struct {
	o     Options
	recv  map[string]Receiver
	eval  *Evaluator
	st    State
	seq   int64                // the last delivery's Seq
	ready map[string]time.Time // per receiver URL: the next send's earliest time
	open  atomic.Pointer[[]Alarm]
}

// New loads the ledger: its firing alarms stay firing, its pending
// deliveries are sent by the next Flush.
func New(o Options) (*Alerter, error) {
	if o.Ledger == nil {
		return nil, errors.New("alerts: a ledger is required")
	}
	if o.Client == nil {
		o.Client = &http.Client{Timeout: 10 * time.Second}
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	st, err := o.Ledger.Load()
	if err != nil {
		return nil, err
	}
	a := &Alerter{o: o, recv: map[string]Receiver{}, st: st, ready: map[string]time.Time{},
		eval: NewEvaluator(o.Rules, o.VendorOf, st.Firing)}
	for _, d := range st.Deliveries {
		a.seq = max(a.seq, d.Seq)
	}
	for _, r := range o.Config.Receivers {
		a.recv[r.Name] = r
	}
	a.publish()
	if err := a.dropUnrouted(time.Now()); err != nil {
		return nil, err
	}
	return a, nil
}

// dropUnrouted answers the ledger's pending deliveries to receivers the
// config no longer has: logged, kept as refused, never sent.
func (a *Alerter) dropUnrouted(now time.Time) error {
	var changed []Delivery
	for i := range a.st.Deliveries {
		d := &a.st.Deliveries[i]
		if _, ok := a.recv[d.Receiver]; !ok && d.SentAt.IsZero() {
			d.SentAt, d.Refused = now, "receiver no longer configured"
			a.o.Logf("alerts: %s was pending for receiver %s, which the config no longer has: not sent", d.ID, d.Receiver)
			changed = append(changed, *d)
		}
	}
	if len(changed) == 0 {
		return nil
	}
	return a.save(now, changed...)
}

// Run evaluates source every interval and delivers as deliveries fall
// due, until ctx is done; now is the clock (time.Now in kbgen serve).
func (a *Alerter) Run(ctx context.Context, every time.Duration, now func() time.Time, source func() Facts) {
	nextEval := now()
	for {
		t := now()
		if !t.Before(nextEval) {
			if err := a.Evaluate(t, source()); err != nil {
				a.o.Logf("alerts: ledger: %v", err)
			}
			nextEval = t.Add(every)
		}
		due, err := a.Flush(ctx, t)
		if err != nil {
			a.o.Logf("alerts: ledger: %v", err)
		}
		wake := nextEval
		if !due.IsZero() && due.Before(wake) {
			wake = due
		}
		timer := time.NewTimer(max(wake.Sub(now()), 10*time.Millisecond))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
	}
}

// Evaluate judges f at now and writes each transition's deliveries to
// the ledger, pending, before anything is sent.
func (a *Alerter) Evaluate(now time.Time, f Facts) error {
	if a.o.Canaries != nil {
		f.Canaries, f.CanariesKnown = a.o.Canaries.Canaries(now)
	}
	ts := a.eval.Evaluate(now, f)
	if len(ts) == 0 {
		return nil
	}
	a.publish()
	var added []Delivery
	for _, t := range ts {
		for _, r := range a.o.Config.ReceiversFor(t.Alarm) {
			a.seq++
			added = append(added, Delivery{Seq: a.seq, ID: DeliveryID(t, r), Receiver: r, Transition: t})
		}
	}
	a.st.Deliveries = append(a.st.Deliveries, added...)
	return a.save(now, added...)
}

// Pending is the deliveries not yet answered 2xx, in order.
func (a *Alerter) Pending() []Delivery {
	var out []Delivery
	for _, d := range a.st.Deliveries {
		if d.SentAt.IsZero() {
			out = append(out, d)
		}
	}
	return out
}

// Firing is the alarms firing now (the Run goroutine's view).
func (a *Alerter) Firing() []Alarm { return a.eval.Firing() }

// Open is the alarms firing as of the last evaluation, by id: safe from
// any goroutine (the dashboard's).
func (a *Alerter) Open() []Alarm { return *a.open.Load() }

func (a *Alerter) publish() {
	f := a.eval.Firing()
	a.open.Store(&f)
}

// save writes the firing alarms and the changed deliveries to the
// ledger, and forgets what was answered KeepSent ago.
func (a *Alerter) save(now time.Time, changed ...Delivery) error {
	a.st.Firing = a.eval.Firing()
	keepFrom := now.Add(-KeepSent)
	kept := a.st.Deliveries[:0]
	for _, d := range a.st.Deliveries {
		if d.SentAt.IsZero() || !d.SentAt.Before(keepFrom) {
			kept = append(kept, d)
		}
	}
	a.st.Deliveries = kept
	return a.o.Ledger.Save(a.st.Firing, changed, keepFrom)
}
