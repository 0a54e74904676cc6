package alert

import (
	"slices"
	"sync"
)

// MemoryLedger is a Ledger in memory: what a service without a store
// uses (a restart forgets), and the tests' shared one.
type MemoryLedger struct {
	mu     sync.Mutex
	alarms map[string]Alarm
	queue  []Delivery
	done   map[int64]bool
	seq    int64
}

// NewMemoryLedger returns an empty ledger.
func NewMemoryLedger() *MemoryLedger {
	return &MemoryLedger{alarms: map[string]Alarm{}, done: map[int64]bool{}}
}

func (l *MemoryLedger) Alarms() ([]Alarm, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Alarm
	for _, a := range l.alarms {
		out = append(out, a)
	}
	return out, nil
}

func (l *MemoryLedger) Record(alarms []Alarm, gone []string, ds []Delivery) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, a := range alarms {
		l.alarms[a.ID] = a
	}
	for _, id := range gone {
		delete(l.alarms, id)
	}
	for _, d := range ds {
		l.seq++
		d.Seq = l.seq
		l.queue = append(l.queue, d)
	}
	return nil
}

func (l *MemoryLedger) Pending() ([]Delivery, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.DeleteFunc(slices.Clone(l.queue), func(d Delivery) bool { return l.done[d.Seq] }), nil
}

func (l *MemoryLedger) Delivered(seq int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.done[seq] = true
	l.queue = slices.DeleteFunc(l.queue, func(d Delivery) bool { return d.Seq == seq })
	return nil
}
