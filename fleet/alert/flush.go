package alert

import (
	"context"
	"time"
)

// Flush sends what is due at now: per receiver, its pending deliveries in
// order, each once its backoff is over and the receiver's interval since
// the last send has passed (so one Slack message per Flush per webhook
// within a second). A failure stops that receiver's queue until its
// backoff is over, keeping the order. It returns when the next delivery
// is due (zero: none pending). Every outcome is in the ledger before
// Flush returns.
func (a *Alerter) Flush(ctx context.Context, now time.Time) (time.Time, error) {
	var saveErr error
	for _, r := range a.o.Config.Receivers {
		for {
			i := a.head(r.Name)
			if i < 0 || now.Before(a.st.Deliveries[i].NotBefore) || now.Before(a.ready[r.URL]) {
				break
			}
			ok := a.attempt(ctx, now, r, &a.st.Deliveries[i])
			if err := a.save(now, a.st.Deliveries[i]); err != nil && saveErr == nil {
				saveErr = err
			}
			if !ok {
				break
			}
		}
	}
	return a.nextDue(), saveErr
}

// head is the index of receiver's first pending delivery, -1 when none.
func (a *Alerter) head(receiver string) int {
	for i, d := range a.st.Deliveries {
		if d.Receiver == receiver && d.SentAt.IsZero() {
			return i
		}
	}
	return -1
}

// attempt sends d once: true when it is done with (sent, or refused for
// good), false when it waits for its backoff.
func (a *Alerter) attempt(ctx context.Context, now time.Time, r Receiver, d *Delivery) bool {
	err := send(ctx, a.o.Client, r, *d)
	d.Attempts++
	if err == nil {
		d.SentAt = now
		a.ready[r.URL] = now.Add(interval(r.Kind))
		return true
	}
	se, _ := err.(*sendError)
	if se != nil && se.permanent {
		// Refused for good: kept in the ledger as answered, not retried.
		d.SentAt, d.Refused = now, se.msg
		a.o.Logf("alerts: receiver %s refused %s for good: %v", r.Name, d.ID, err)
		return true
	}
	wait := backoff(d.Attempts)
	if se != nil {
		wait = max(wait, se.retryAfter)
	}
	d.NotBefore = now.Add(wait)
	a.o.Logf("alerts: receiver %s: %s not delivered (attempt %d, next in %s): %v", r.Name, d.ID, d.Attempts, wait, err)
	return false
}

func interval(kind string) time.Duration {
	if kind == KindSlack {
		return SlackInterval
	}
	return WebhookInterval
}

// backoff is the wait after the n-th failed attempt: 1s, 2s, 4s… at most
// MaxBackoff.
func backoff(n int) time.Duration {
	d := FirstBackoff
	for i := 1; i < n && d < MaxBackoff; i++ {
		d *= 2
	}
	return min(d, MaxBackoff)
}

// nextDue is when the earliest pending delivery may be tried.
func (a *Alerter) nextDue() time.Time {
	var next time.Time
	for _, r := range a.o.Config.Receivers {
		i := a.head(r.Name)
		if i < 0 {
			continue
		}
		t := a.st.Deliveries[i].NotBefore
		if a.ready[r.URL].After(t) {
			t = a.ready[r.URL]
		}
		if next.IsZero() || t.Before(next) {
			next = t
		}
	}
	return next
}
