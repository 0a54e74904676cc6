package store

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpu-mode/kbgen/fleet/canary"
)

// TestCanaryPointsRoundTrip: canary points come back by agent and time
// with their context, the same run again replaces its point, and
// PruneCanaries keeps CanaryRetention, on both databases.
func TestCanaryPointsRoundTrip(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) {
			s := open(t, opts(t, "kbgen"))
			ctx := context.Background()
			now := time.Now().UTC().Truncate(time.Millisecond)
			ctxA := canary.Context{Driver: "550.54.15", ImageDigest: "sha256:ab", KbgenVersion: "v1", CPUModel: "EPYC"}
			b1 := canary.Point{Agent: "b", RunID: "kbgen-canary-b-1", At: now.Add(-time.Hour), Score: 1500, Context: ctxA, Fingerprint: "H100 / EPYC"}
			a1 := canary.Point{Agent: "a", RunID: "kbgen-canary-a-1", At: now, Score: 1400, Context: ctxA, Fingerprint: "H100 / EPYC", Noisy: true}
			a0 := canary.Point{Agent: "a", RunID: "kbgen-canary-a-0", At: now.Add(-2 * time.Hour), Score: 1, Context: ctxA}
			a0fixed := a0
			a0fixed.Score = 1410
			old := canary.Point{Agent: "a", RunID: "kbgen-canary-a-old", At: now.Add(-CanaryRetention - time.Hour), Score: 9}
			for _, p := range []canary.Point{b1, a1, a0, a0fixed, old} {
				if err := s.RecordCanary(ctx, p); err != nil {
					t.Fatal(err)
				}
			}
			if n, err := s.PruneCanaries(ctx, now); err != nil || n != 1 {
				t.Fatalf("pruned %d, %v; want the one past the retention", n, err)
			}
			got, err := s.CanaryPoints(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]canary.Point{a0fixed, a1, b1}, got); d != "" {
				t.Errorf("points (-want +got):\n%s", d)
			}
			if got, _ := s.CanaryPoints(ctx, now.Add(-90*time.Minute)); len(got) != 2 {
				t.Errorf("since 90 minutes ago: %d points, want 2", len(got))
			}
		})
	}
}
