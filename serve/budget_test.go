package serve

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/exitcode"
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
		_, _ = b.Acquire(ctx, Create, nil)
		clk.add(time.Second)
	}
	if d := b.Ready(Create); d != 56*time.Second+time.Millisecond {
		t.Fatalf("6th create waits %s, want 56.001s (the first leaves the 61 s window)", d)
	}
	for range 5 {
		if b.Ready(Poll) != 0 {
			t.Fatal("polls must use the share creates left")
		}
		_, _ = b.Acquire(ctx, Poll, nil)
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
	b.Observe(0, 200, h, "")
	if d := b.Ready(Urgent); d != 30*time.Second {
		t.Fatalf("org nearly out: waits %s, want 30s", d)
	}
	clk.add(30 * time.Second)
	if d := b.Ready(Urgent); d != 0 {
		t.Fatalf("after the reset: waits %s", d)
	}
	h = http.Header{}
	h.Set("Retry-After", "7")
	b.Observe(0, http.StatusTooManyRequests, h, "")
	if d := b.Ready(Poll); d != 7*time.Second {
		t.Fatalf("after a 429: waits %s, want 7s", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	said := false
	if _, err := b.Acquire(ctx, Poll, func() { said = true }); err == nil || !said {
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
		_, _ = b.Acquire(context.Background(), Poll, nil)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _, _ = b.Acquire(ctx, Urgent, nil) }()
	for b.Stats().Waiting == 0 {
		time.Sleep(time.Millisecond)
	}
	clk.add(62 * time.Second) // the window is empty again
	if d := b.Ready(Poll); d == 0 {
		t.Fatal("a poll goes before the waiting fetch")
	}
}

// TestBudgetPerUser: each token stays under PerUser in any window, the
// request goes with the token that has the most room, and the total stays
// under PerMinute (rate_limits.md: a per-user limit besides the org's).
func TestBudgetPerUser(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name              string
		org, perUser      int
		tokens            []string
		effective, before int // requests that go at once
	}{
		{"one token: the user limit binds", 100, 45, nil, 45, 45},
		{"three tokens: they add up", 200, 45, []string{"a", "b", "c"}, 135, 135},
		{"three tokens: the org share binds", 100, 45, []string{"a", "b", "c"}, 100, 100},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			clk := &fakeNow{t: time.Unix(1e9, 0)}
			b := NewUserBudget(tt.org, tt.perUser, tt.tokens)
			b.now = clk.now
			if b.Effective() != tt.effective {
				t.Fatalf("Effective = %d, want %d", b.Effective(), tt.effective)
			}
			per := map[int]int{}
			n := 0
			for b.Ready(Urgent) == 0 {
				u, _ := b.Acquire(context.Background(), Urgent, nil)
				per[u]++
				n++
			}
			if n != tt.before {
				t.Fatalf("%d requests went at once, want %d", n, tt.before)
			}
			for u, k := range per {
				if k > tt.perUser {
					t.Errorf("token %d sent %d, more than %d", u, k, tt.perUser)
				}
				if max(len(tt.tokens), 1) > 1 && k < n/len(tt.tokens)-1 {
					t.Errorf("token %d sent %d of %d: not spread", u, k, n)
				}
			}
		})
	}
}

// TestBudget429Scope: a 429 stops only the scope its body names: a user's
// (that token waits for RateLimit-User-Reset, the others go on) or the
// organization's (everyone waits for RateLimit-Reset).
func TestBudget429Scope(t *testing.T) {
	t.Parallel()
	clk := &fakeNow{t: time.Unix(1e9, 0)}
	b := NewUserBudget(100, 45, []string{"a", "b"})
	b.now = clk.now
	h := http.Header{}
	h.Set("RateLimit-Remaining", "150")
	h.Set("RateLimit-Reset", "10")
	h.Set("RateLimit-User-Remaining", "0")
	h.Set("RateLimit-User-Reset", "42")
	b.Observe(0, http.StatusTooManyRequests, h, "rest_user")
	for range 3 {
		if u, _ := b.Acquire(context.Background(), Urgent, nil); u != 1 {
			t.Fatalf("token 0 is out for 42 s, yet chosen")
		}
	}
	b.Observe(1, http.StatusOK, http.Header{"Ratelimit-User-Remaining": {"1"}, "Ratelimit-User-Reset": {"20"}}, "")
	if d := b.Ready(Urgent); d != 20*time.Second {
		t.Fatalf("both tokens out: waits %s, want 20s (token 1's reset)", d)
	}
	clk.add(20 * time.Second)
	b.Observe(1, http.StatusTooManyRequests, h, "rest")
	if d := b.Ready(Urgent); d != 10*time.Second {
		t.Fatalf("org out: waits %s, want 10s", d)
	}
	if st := b.Stats(); len(st.UserRemaining) != 2 || st.UserRemaining[0] != 0 || st.OrgRemaining != 0 {
		t.Errorf("stats %+v", st)
	}
}

// TestCheckBudget: a budget Buildkite's limits cannot hold is refused
// (exit 2), not accepted silently (issue 27: --api-budget 500).
func TestCheckBudget(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                      string
		api, user, orgLim, usrLim int
		wantErr                   string
	}{
		{"the defaults", DefaultAPIBudget, DefaultPerUser, client.OrgLimit, client.UserLimit, ""},
		{"all of the organization's minute", 200, 50, 200, 50, ""},
		{"over the organization's limit", 500, 45, 200, 50, "--api-budget 500 is outside 1..200"},
		{"an organization Buildkite gave more", 500, 45, 1000, 50, ""},
		{"zero", 0, 45, 200, 50, "--api-budget 0"},
		{"over a user's limit", 100, 60, 200, 50, "--user-budget 60 is outside 1..50"},
		{"a negative limit", 100, 45, -1, 50, "must be positive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := CheckBudget(tc.api, tc.user, tc.orgLim, tc.usrLim)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			// The message is the contract: the operator reads which flag to fix and how.
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || exitcode.Of(err) != exitcode.Usage {
				t.Fatalf("err %v (exit %d), want exit 2 saying %q", err, exitcode.Of(err), tc.wantErr)
			}
		})
	}
}
