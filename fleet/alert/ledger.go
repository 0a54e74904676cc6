package alert

import (
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// Delivery is one transition for one receiver: pending until the
// receiver answered 2xx, then sent.
type Delivery struct {
	// Seq orders the deliveries: the alerter numbers them as it makes
	// them, and the ledger keeps them by it.
	Seq int64 `json:"seq"`
	// ID is the transition's id for this receiver (DeliveryID): the same
	// after a restart, so a receiver can drop a repeat.
	ID         string     `json:"id"`
	Receiver   string     `json:"receiver"`
	Transition Transition `json:"transition"`
	Attempts   int        `json:"attempts,omitempty"`
	// NotBefore is when it may be tried again (backoff).
	NotBefore time.Time `json:"not_before,omitzero"`
	SentAt    time.Time `json:"sent_at,omitzero"`
	// Refused is why it was answered but not delivered (a 4xx that
	// retrying cannot change, a receiver no longer configured); SentAt is
	// when.
	Refused string `json:"refused,omitempty"`
}

// DeliveryID is the id of t for receiver: alarm, status, the episode
// (when the condition began to hold) and the receiver.
func DeliveryID(t Transition, receiver string) string {
	return fmt.Sprintf("%s-%s-%d-%s", t.Alarm.ID, t.Status, t.Alarm.Since.UnixNano(), receiver)
}

// State is what the ledger keeps: the alarms firing, and the deliveries
// pending or recently answered, by Seq.
type State struct {
	Firing     []Alarm    `json:"firing"`
	Deliveries []Delivery `json:"deliveries"`
}

// Ledger keeps State across restarts. kbgen serve's is its store's
// (fleet/store: SQLite or PostgreSQL, migration 3); without a store it
// is a MemoryLedger. Save is called before a delivery is first sent and
// after each answer, so a restart resends exactly what had no 2xx
// answer.
type Ledger interface {
	// Load is the state last saved; an empty ledger is an empty State.
	Load() (State, error)
	// Save writes, in one step, the alarms firing now (replacing those
	// kept), the deliveries given (new or changed, by Seq), and drops the
	// deliveries answered before keepFrom.
	Save(firing []Alarm, changed []Delivery, keepFrom time.Time) error
}

// MemoryLedger is a Ledger in memory: what kbgen serve without a store
// uses (a restart forgets its alarms and pending deliveries), and the
// tests' restarts share one.
type MemoryLedger struct {
	mu     sync.Mutex
	firing []Alarm
	by     map[int64]Delivery
}

// NewMemoryLedger is an empty ledger.
func NewMemoryLedger() *MemoryLedger { return &MemoryLedger{by: map[int64]Delivery{}} }

// Load is a copy of what was saved.
func (l *MemoryLedger) Load() (State, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := State{Firing: slices.Clone(l.firing)}
	for _, seq := range slices.Sorted(maps.Keys(l.by)) {
		st.Deliveries = append(st.Deliveries, l.by[seq])
	}
	return st, nil
}

// Save keeps firing and changed, and drops what was answered before
// keepFrom.
func (l *MemoryLedger) Save(firing []Alarm, changed []Delivery, keepFrom time.Time) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.firing = slices.Clone(firing)
	for _, d := range changed {
		l.by[d.Seq] = d
	}
	maps.DeleteFunc(l.by, func(_ int64, d Delivery) bool { return !d.SentAt.IsZero() && d.SentAt.Before(keepFrom) })
	return nil
}
