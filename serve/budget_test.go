package serve

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"
)

type fakeNow struct {
	mu sync.Mutex
	t  time.Time
}

func (f *fakeNow) now() time.Time { f.mu.Lock(); defer f.mu.Unlock(); return f.t }
func (f *fakeNow) add(d time.Duration) {
	f.mu.Lock()
	f.t = f.t.Add(d)
	f.mu.Unlock()
}

func TestBudgetWindowAndShares(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1e9, 0)}
	b := NewBudget(10) // creates may use 5, polls and fetches all 10
	b.now = clk.now
	ctx := context.Background()
	for i := range 5 {
		if d := b.Ready(Create); d != 0 {
			t.Fatalf("create %d must not wait, waits %s", i, d)
		}
		_ = b.Acquire(ctx, Create, nil)
		clk.add(time.Second)
	}
	if d := b.Ready(Create); d != 56*time.Second+time.Millisecond {
		t.Fatalf("6th create waits %s, want 56.001s (the first leaves the 61 s window)", d)
	}
	for range 5 {
		if b.Ready(Poll) != 0 {
			t.Fatal("polls must use the share creates left")
		}
		_ = b.Acquire(ctx, Poll, nil)
	}
	if d := b.Ready(Urgent); d == 0 {
		t.Fatal("an 11th request in one minute does not wait")
	}
	clk.add(57 * time.Second)
	if d := b.Ready(Create); d != 0 {
		t.Fatalf("after the window slid, create waits %s", d)
	}
	if s := b.Stats(); s.InLastMinute != 8 || s.Sent != 10 {
		t.Errorf("stats %+v", s)
	}
}

func TestBudgetObservesOrgLimit(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1e9, 0)}
	b := NewBudget(100)
	b.now = clk.now
	h := http.Header{}
	h.Set("RateLimit-Remaining", "2")
	h.Set("RateLimit-Reset", "30")
	b.Observe(200, h)
	if d := b.Ready(Urgent); d != 30*time.Second {
		t.Fatalf("org nearly out: waits %s, want 30s", d)
	}
	clk.add(30 * time.Second)
	if d := b.Ready(Urgent); d != 0 {
		t.Fatalf("after the reset: waits %s", d)
	}
	h = http.Header{}
	h.Set("Retry-After", "7")
	b.Observe(http.StatusTooManyRequests, h)
	if d := b.Ready(Poll); d != 7*time.Second {
		t.Fatalf("after a 429: waits %s, want 7s", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	said := false
	if err := b.Acquire(ctx, Poll, func() { said = true }); err == nil || !said {
		t.Fatalf("Acquire on a spent budget: %v, told %v", err, said)
	}
}

// TestBudgetUrgentFirst: while a result fetch waits, polls and creates
// wait behind it.
func TestBudgetUrgentFirst(t *testing.T) {
	clk := &fakeNow{t: time.Unix(1e9, 0)}
	b := NewBudget(10)
	b.now = clk.now
	for range 10 {
		_ = b.Acquire(context.Background(), Poll, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = b.Acquire(ctx, Urgent, nil) }()
	for b.Stats().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.add(62 * time.Second) // the window is empty again
	if d := b.Ready(Poll); d == 0 {
		t.Fatal("a poll goes before the waiting fetch")
	}
}
