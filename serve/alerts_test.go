package serve

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
)

// TestAlertsAgentLost: an agent.lost webhook becomes a FIRING alarm on
// the configured webhook channel and an open alert on the dashboard;
// agent.connected resolves it, with the same alarm id.
func TestAlertsAgentLost(t *testing.T) {
	const secret = "whsec-alerts"
	var mu sync.Mutex
	var got []alert.Message
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var m alert.Message
		_ = json.Unmarshal(b, &m)
		mu.Lock()
		got = append(got, m)
		mu.Unlock()
	}))
	defer recv.Close()
	cfg := &alert.Config{Channels: []alert.Channel{{Name: "ops", Kind: alert.Webhook, URL: recv.URL}}, Routes: []alert.Route{{Channel: "ops"}},
		Rules: alert.Rules{For: alert.Duration(time.Millisecond)}}
	r := newRig(t, rigOpts{secret: secret, view: testViewToken, alerts: cfg})
	messages := func(n int) []alert.Message {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
			mu.Lock()
			out := append([]alert.Message(nil), got...)
			mu.Unlock()
			if len(out) >= n {
				return out
			}
		}
		t.Fatalf("the channel got fewer than %d messages; log:\n%s", n, r.log.String())
		return nil
	}
	if code := r.signedHook(secret, []byte(`{"event": "agent.lost", "agent": {"name": "h100-1", "meta_data": ["queue=nvidia-h100"]}}`)); code != 200 {
		t.Fatalf("webhook: %d", code)
	}
	m := messages(1)
	if m[0].Status != alert.StatusFiring || m[0].AlarmID != "agent_lost/h100-1" || m[0].Queue != "nvidia-h100" {
		t.Fatalf("first message %+v", m[0])
	}
	if _, body := r.do("GET", "/dashboard", nil, testViewToken); !strings.Contains(string(body), "agent_lost/h100-1") && !strings.Contains(string(body), "h100-1: Buildkite webhook agent.lost") {
		t.Errorf("the dashboard shows no open alert:\n%s", body)
	}
	if code := r.signedHook(secret, []byte(`{"event": "agent.connected", "agent": {"name": "h100-1", "meta_data": ["queue=nvidia-h100"]}}`)); code != 200 {
		t.Fatalf("webhook: %d", code)
	}
	m = messages(2)
	if m[1].Status != alert.StatusResolved || m[1].AlarmID != m[0].AlarmID || len(m) != 2 {
		t.Fatalf("messages %+v", m)
	}
}
