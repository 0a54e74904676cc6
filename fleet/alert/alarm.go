package alert

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"maps"
	"slices"
	"time"
)

// Alarm statuses, as Alertmanager and the rules name them.
const (
	Firing   = "firing"
	Resolved = "resolved"
)

// Alarm is one condition for one set of labels.
type Alarm struct {
	// ID is stable: the hash of the condition and its labels (AlarmID),
	// the same across restarts and for every receiver.
	ID        string            `json:"id"`
	Condition string            `json:"condition"`
	Labels    map[string]string `json:"labels"`
	Summary   string            `json:"summary"`
	// Since is when the condition began to hold; FiredAt when its alarm
	// fired (zero while it waits out its duration).
	Since   time.Time `json:"since"`
	FiredAt time.Time `json:"fired_at,omitzero"`
}

// AlarmID is the stable id of condition with labels: the first 16 hex
// digits of the SHA-256 of the condition and its sorted labels, encoded
// as JSON so that no label value can pose as a boundary.
func AlarmID(condition string, labels map[string]string) string {
	parts := []string{condition}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		parts = append(parts, k, labels[k])
	}
	b, _ := json.Marshal(parts) // strings only: cannot fail
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Transition is an alarm that fired or resolved.
type Transition struct {
	Alarm  Alarm     `json:"alarm"`
	Status string    `json:"status"`
	At     time.Time `json:"at"`
}

// Evaluator holds the alarms between snapshots.
type Evaluator struct {
	Rules Rules
	// VendorOf names a queue's vendor (the registry's donor); the alarm
	// gets it as label vendor, routing reads it. nil: no vendor label.
	VendorOf func(queue string) string
	alarms   map[string]*Alarm
}

// NewEvaluator is an evaluator whose firing alarms are firing (from the
// ledger, after a restart: they do not fire again).
func NewEvaluator(r Rules, vendorOf func(string) string, firing []Alarm) *Evaluator {
	e := &Evaluator{Rules: r, VendorOf: vendorOf, alarms: map[string]*Alarm{}}
	for _, a := range firing {
		e.alarms[a.ID] = &a
	}
	return e
}

// Evaluate judges f at now: alarms whose condition held for its
// duration fire, firing alarms whose condition no longer holds resolve.
// A condition whose data is not known keeps its alarms as they are.
func (e *Evaluator) Evaluate(now time.Time, f Facts) []Transition {
	var out []Transition
	for _, cond := range Conditions {
		findings, known := judges[cond](f, e.Rules)
		if known {
			out = append(out, e.judged(now, cond, findings)...)
		}
	}
	return out
}

func (e *Evaluator) judged(now time.Time, cond string, findings []Finding) []Transition {
	var out []Transition
	holds := map[string]bool{}
	for _, fd := range findings {
		a := e.alarm(now, fd)
		holds[a.ID] = true
		if a.FiredAt.IsZero() && now.Sub(a.Since) >= e.Rules.For[cond] {
			a.FiredAt = now
			out = append(out, Transition{Alarm: *a, Status: Firing, At: now})
		}
	}
	for _, id := range slices.Sorted(maps.Keys(e.alarms)) {
		a := e.alarms[id]
		if a.Condition != cond || holds[id] {
			continue
		}
		delete(e.alarms, id)
		if !a.FiredAt.IsZero() {
			out = append(out, Transition{Alarm: *a, Status: Resolved, At: now})
		}
	}
	return out
}

// alarm is fd's alarm, new (since now) or the one held; its summary is
// the latest.
func (e *Evaluator) alarm(now time.Time, fd Finding) *Alarm {
	labels := maps.Clone(fd.Labels)
	if q := labels["queue"]; q != "" && e.VendorOf != nil {
		if v := e.VendorOf(q); v != "" {
			labels["vendor"] = v
		}
	}
	id := AlarmID(fd.Condition, labels)
	a, ok := e.alarms[id]
	if !ok {
		a = &Alarm{ID: id, Condition: fd.Condition, Labels: labels, Since: now}
		e.alarms[id] = a
	}
	a.Summary = fd.Summary
	return a
}

// Firing is the alarms firing now, by id.
func (e *Evaluator) Firing() []Alarm {
	var out []Alarm
	for _, id := range slices.Sorted(maps.Keys(e.alarms)) {
		if a := e.alarms[id]; !a.FiredAt.IsZero() {
			out = append(out, *a)
		}
	}
	return out
}
