package metrics

import (
	"sync"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
)

// Other is the label value past a label's cap.
const Other = "other"

// Caps on distinct label values: far above a real fleet, low enough that
// a misbehaving agent host cannot grow a scrape without bound.
const (
	MaxQueues = 256
	MaxAgents = 2048
	maxLabel  = 128
)

// bound keeps at most max distinct values of one label; later new ones
// become Other.
type bound struct {
	mu   sync.Mutex
	max  int
	seen map[string]bool
}

func newBound(n int) *bound { return &bound{max: n, seen: map[string]bool{}} }

// value is v cleaned, or Other once max others were seen.
func (b *bound) value(v string) string {
	v = runfacts.Text(v, maxLabel)
	if v == "" {
		return "unknown"
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= b.max {
		return Other
	}
	b.seen[v] = true
	return v
}
