package serve

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

func TestQueuesServedFromOneCachedView(t *testing.T) {
	r := newRig(t, rigOpts{queueTTL: time.Hour})
	r.fake.SetAgents([]fakebuildkite.AgentSpec{
		{Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100", BusyWith: ":nvidia: eval"},
		{Name: "h100-gpu1", Version: "3.52.1", Queue: "nvidia-h100"},
		{Name: "h100-gpu2", Version: "3.52.1", Queue: "nvidia-h100", Paused: true},
		{Name: "mi300-gpu0", Version: "3.52.1", Queue: "amd-mi300"},
	})
	var wg sync.WaitGroup
	answers := make([]QueueStatus, 40)
	for i := range answers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, body := r.do("GET", "/v1/queues/h100", nil, testToken)
			if resp.StatusCode != http.StatusOK {
				t.Errorf("GET /v1/queues/h100: %d %s", resp.StatusCode, body)
			}
			_ = json.Unmarshal(body, &answers[i])
		}()
	}
	wg.Wait()
	for i, a := range answers {
		if a.Queue != "nvidia-h100" || a.Total != 3 || a.Idle != 1 || a.Busy != 1 || a.Running != 1 || a.Waiting != 0 || a.AsOf.IsZero() {
			t.Fatalf("answer %d: %+v", i, a)
		}
	}
	if n := r.fake.CountRequests("GET", "/agents"); n != 1 {
		t.Errorf("40 callers made %d agent list requests; want 1 (one cached view)", n)
	}
	if n := r.svc.QueueRefreshes(); n != 1 {
		t.Errorf("%d refreshes; want 1", n)
	}

	tests := []struct {
		name, path, token string
		code              int
		want              string
	}{
		{"all queues", "/v1/queues", testToken, http.StatusOK, `"queue":"amd-mi300"`},
		{"a registry queue without agents", "/v1/queues/nvidia-b200", testToken, http.StatusOK, `"total":0`},
		{"unknown queue", "/v1/queues/nosuch", testToken, http.StatusNotFound, "nosuch"},
		{"no token", "/v1/queues", "", http.StatusUnauthorized, "bearer token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := r.do("GET", tc.path, nil, tc.token)
			if resp.StatusCode != tc.code || !strings.Contains(string(body), tc.want) {
				t.Fatalf("GET %s: %d %s; want %d with %q", tc.path, resp.StatusCode, body, tc.code, tc.want)
			}
		})
	}
	if n := r.fake.CountRequests("GET", "/agents"); n != 1 {
		t.Errorf("after more calls, %d agent list requests; want still 1 within the TTL", n)
	}
}

func TestQueuesRefreshAfterTTL(t *testing.T) {
	const ttl = 100 * time.Millisecond
	r := newRig(t, rigOpts{queueTTL: ttl})
	r.fake.SetAgents([]fakebuildkite.AgentSpec{{Name: "a", Version: "3", Queue: "nvidia-h100"}})
	start := time.Now()
	r.do("GET", "/v1/queues/h100", nil, testToken)
	r.fake.SetAgents([]fakebuildkite.AgentSpec{{Name: "a", Version: "3", Queue: "nvidia-h100", BusyWith: "eval"}})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		_, body := r.do("GET", "/v1/queues/h100", nil, testToken)
		var q QueueStatus
		_ = json.Unmarshal(body, &q)
		if q.Busy == 1 {
			if n, most := r.fake.CountRequests("GET", "/agents"), int(time.Since(start)/ttl)+1; n > most {
				t.Errorf("%d agent list requests: more than one per TTL", n)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatal("the view never showed the agent busy: no refresh after the TTL")
}

func TestQueuesUnavailable(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.fake.AddFault(fakebuildkite.Fault{Method: "GET", Path: "/agents", Status: http.StatusForbidden, Times: 100})
	resp, body := r.do("GET", "/v1/queues/h100", nil, testToken)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "queue status unavailable") {
		t.Fatalf("GET with Buildkite refusing: %d %s; want 503 saying why", resp.StatusCode, body)
	}
}
