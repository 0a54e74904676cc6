package store

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/gpu-mode/kbgen/fleet/verify"
)

// TestVerificationsRoundTrip: a verification comes back as it was kept,
// the same run again replaces it (a re-run finished), and Prune drops
// those started before the retention, on both databases.
func TestVerificationsRoundTrip(t *testing.T) {
	for name, opts := range backends(t) {
		t.Run(name, func(t *testing.T) {
			o := opts(t, "kbgen")
			o.Retention = time.Hour
			s := open(t, o)
			ctx := context.Background()
			now := time.Now().UTC().Truncate(time.Millisecond)
			orig := verify.Measurement{RunID: "lb-1", Agent: "n0-gpu0", Fingerprint: "H100 / EPYC", Score: 1000, Done: true}
			running := verify.Record{RunID: "lb-1", Queue: "nvidia-h100", StartedAt: now.Add(-time.Minute), Original: orig, Want: 1, Bound: 0.06,
				Reruns: []verify.Measurement{{RunID: "lb-1.verify0-1", Agent: "n1-gpu0"}}}
			done := running
			done.Reruns = []verify.Measurement{{RunID: "lb-1.verify0-1", Agent: "n1-gpu0", Fingerprint: "H100 / EPYC", Score: 1010, Done: true}}
			old := verify.Record{RunID: "lb-0", StartedAt: now.Add(-2 * time.Hour), Original: orig, Want: 1}
			for _, rec := range []verify.Record{old, running, done} {
				if err := s.PutVerification(ctx, rec); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := s.Prune(ctx, now); err != nil {
				t.Fatal(err)
			}
			got, err := s.Verifications(ctx, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff([]verify.Record{done}, got); d != "" {
				t.Errorf("verifications (-want +got):\n%s", d)
			}
		})
	}
}
