package alert

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// Condition is something wrong now; its ID is stable for as long as the
// same thing is wrong (rule and subject: "queue_stuck/nvidia-h100").
type Condition struct {
	ID, Name, Queue, Summary string
}

// Alarm states.
const (
	Pending = "pending" // holding, not yet for Rules.For
	Firing  = "firing"
)

// Alarm is a condition the engine follows.
type Alarm struct {
	Condition
	State   string    `json:"state"`
	Since   time.Time `json:"since"`
	FiredAt time.Time `json:"fired_at,omitzero"`
}

// Statuses of a message.
const (
	StatusFiring   = "FIRING"
	StatusResolved = "RESOLVED"
)

// Message is what a channel gets.
type Message struct {
	AlarmID string    `json:"alarm_id"`
	Status  string    `json:"status"`
	Name    string    `json:"name"`
	Queue   string    `json:"queue,omitempty"`
	Summary string    `json:"summary"`
	Since   time.Time `json:"since"`
	At      time.Time `json:"at"`
	// Key is the same for every try of one message (the alarm, its
	// status, when it fired): a receiver that got it twice can tell.
	Key string `json:"key"`
}

// Delivery is one message for one channel, numbered by the ledger.
type Delivery struct {
	Seq     int64
	Channel string
	Message Message
}

// Ledger keeps the alarms and the deliveries across restarts.
type Ledger interface {
	// Alarms is the alarms as last recorded.
	Alarms() ([]Alarm, error)
	// Record saves, at once, the alarms now, the ids no longer alarms,
	// and new deliveries (their Seq is the ledger's to give).
	Record(alarms []Alarm, gone []string, deliveries []Delivery) error
	// Pending is the deliveries not yet delivered, oldest first.
	Pending() ([]Delivery, error)
	// Delivered marks a delivery done.
	Delivered(seq int64) error
}

// Engine turns conditions into alarms and alarms into deliveries.
type Engine struct {
	cfg    Config
	ledger Ledger

	mu     sync.Mutex
	alarms map[string]*Alarm
	wake   chan struct{}
}

// NewEngine restores the alarms from ledger: an alarm that was firing
// before a restart is not fired again.
func NewEngine(cfg Config, ledger Ledger) (*Engine, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	e := &Engine{cfg: cfg, ledger: ledger, alarms: map[string]*Alarm{}, wake: make(chan struct{}, 1)}
	as, err := ledger.Alarms()
	if err != nil {
		return nil, fmt.Errorf("alerts: reading the ledger: %w", err)
	}
	for _, a := range as {
		e.alarms[a.ID] = &a
	}
	return e, nil
}

// Rules are the engine's thresholds (defaults filled in).
func (e *Engine) Rules() Rules { return e.cfg.Rules }

// Evaluate takes the conditions active at now: a new one is pending, one
// held for Rules.For fires, and a firing one no longer active resolves.
// Every FIRING and RESOLVED is recorded for its channels before Evaluate
// returns.
func (e *Engine) Evaluate(active []Condition, now time.Time) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	var changed []Alarm
	var gone []string
	var out []Delivery
	seen := map[string]bool{}
	for _, c := range active {
		seen[c.ID] = true
		a := e.alarms[c.ID]
		if a == nil {
			a = &Alarm{Condition: c, State: Pending, Since: now}
			e.alarms[c.ID] = a
			changed = append(changed, *a)
		}
		a.Summary = c.Summary
		if a.State == Pending && now.Sub(a.Since) >= time.Duration(e.cfg.Rules.For) {
			a.State, a.FiredAt = Firing, now
			changed = append(changed, *a)
			out = append(out, e.deliveries(*a, StatusFiring, now)...)
		}
	}
	for id, a := range e.alarms {
		if seen[id] {
			continue
		}
		if a.State == Firing {
			out = append(out, e.deliveries(*a, StatusResolved, now)...)
		}
		gone = append(gone, id)
		delete(e.alarms, id)
	}
	if len(changed) == 0 && len(gone) == 0 {
		return nil
	}
	if err := e.ledger.Record(changed, gone, out); err != nil {
		return fmt.Errorf("alerts: recording: %w", err)
	}
	if len(out) > 0 {
		select {
		case e.wake <- struct{}{}:
		default:
		}
	}
	return nil
}

func (e *Engine) deliveries(a Alarm, status string, now time.Time) []Delivery {
	m := Message{AlarmID: a.ID, Status: status, Name: a.Name, Queue: a.Queue, Summary: a.Summary, Since: a.Since, At: now,
		Key: fmt.Sprintf("%s/%s/%d", a.ID, status, a.FiredAt.UnixMilli())}
	var out []Delivery
	for _, ch := range e.cfg.channelsFor(a.Queue) {
		out = append(out, Delivery{Channel: ch.Name, Message: m})
	}
	return out
}

// Open is the firing alarms, oldest first.
func (e *Engine) Open() []Alarm {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []Alarm
	for _, a := range e.alarms {
		if a.State == Firing {
			out = append(out, *a)
		}
	}
	slices.SortFunc(out, func(a, b Alarm) int { return a.FiredAt.Compare(b.FiredAt) })
	return out
}
