package serve

import (
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

func TestVerifySignature(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"event":"build.finished"}`)
	good := fakebuildkite.SignWebhook("s3cret", now, body)
	cases := []struct {
		name, header string
		body         []byte
		ok           bool
	}{
		{"valid", good, body, true},
		{"valid, spaces", "timestamp=1800000000, signature=" + good[len("timestamp=1800000000,signature="):], body, true},
		{"other body", good, []byte(`{"event":"build.running"}`), false},
		{"other secret", fakebuildkite.SignWebhook("other", now, body), body, false},
		{"too old", fakebuildkite.SignWebhook("s3cret", now.Add(-6*time.Minute), body), body, false},
		{"from the future", fakebuildkite.SignWebhook("s3cret", now.Add(6*time.Minute), body), body, false},
		{"no timestamp", "signature=" + good[len("timestamp=1800000000,signature="):], body, false},
		{"not hex", "timestamp=1800000000,signature=xyz", body, false},
		{"empty", "", body, false},
	}
	for _, tc := range cases {
		err := verifySignature("s3cret", tc.header, tc.body, now, 5*time.Minute)
		if (err == nil) != tc.ok {
			t.Errorf("%s: err %v, want ok=%v", tc.name, err, tc.ok)
		}
	}
}
