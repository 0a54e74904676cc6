package serve

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

// slowScript is a build that would pass 30 s after its creation.
var slowScript = fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 150 * time.Millisecond, EvalStart: 200 * time.Millisecond, Finish: 30 * time.Second}

// stream opens the run's event stream, reads its first event, and returns
// a func that closes it.
func (r *rig) stream(id string) (closeStream func()) {
	r.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "GET", r.http.URL+"/v1/runs/"+id+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	if !bufio.NewScanner(resp.Body).Scan() {
		r.t.Fatalf("no event on the stream of %s", id)
	}
	return func() { cancel(); resp.Body.Close() }
}

// TestOrphans: a run no client follows for the grace period is canceled,
// whether its client streamed and left or never came after its POST
// (issue 26: a run nobody attached to held its GPU); a client that
// streams, re-attaches or polls keeps it, and a detached run is never
// taken for orphaned.
func TestOrphans(t *testing.T) {
	const grace = 300 * time.Millisecond
	tests := []struct {
		name   string
		detach bool
		// client is what the client does after its POST; it returns
		// when the grace period has been tested.
		client     func(r *rig, id string)
		wantCancel bool
	}{
		{"stream closed, nobody re-attaches", false, func(r *rig, id string) {
			r.stream(id)()
		}, true},
		{"never attached after its POST", false, func(r *rig, id string) {}, true},
		{"stream closed, re-attached within the grace period", false, func(r *rig, id string) {
			r.stream(id)()
			time.Sleep(grace / 3)
			defer r.stream(id)()
			time.Sleep(3 * grace)
		}, false},
		{"a client that polls GET", false, func(r *rig, id string) {
			for range 9 {
				time.Sleep(grace / 3)
				r.get(id)
			}
		}, false},
		{"detached, nobody follows", true, func(r *rig, id string) {
			time.Sleep(3 * grace)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, rigOpts{orphan: grace, script: slowScript})
			r.post(RunRequest{RunID: "orphan", Queue: "nvidia-h100", Payload: testPayload(t), Detach: tc.detach})
			tc.client(r, "orphan")
			if !tc.wantCancel {
				if st := r.get("orphan"); st.State == StateDone {
					t.Fatalf("run ended: %+v", st)
				}
				if n := r.fake.CountRequests("PUT", "/cancel"); n != 0 {
					t.Fatalf("%d cancels of a run whose client is there", n)
				}
				return
			}
			r.awaitUnseen("orphan", 5*time.Second)
			st := r.get("orphan")
			if st.Status != StatusTimedOut || !strings.Contains(st.Result.Error, "was canceled") || st.BuildState != "canceled" {
				t.Fatalf("orphan ended %s (%s): %q", st.Status, st.BuildState, st.Result.Error)
			}
			if why := r.canceledEvent("orphan"); !strings.HasPrefix(why, "no client attached for") {
				t.Errorf("canceled event says %q", why)
			}
			if n := r.fake.CountRequests("PUT", "/cancel"); n != 1 {
				t.Fatalf("%d cancel requests; want 1", n)
			}
		})
	}
}

// awaitUnseen waits for the run to be done without a request (a GET
// would count as its client).
func (r *rig) awaitUnseen(id string, within time.Duration) {
	r.t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if run := r.svc.runs.get(id); run != nil && run.Done() {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("run %s not done within %s; log:\n%s", id, within, r.log.String())
}

// get is GET /v1/runs/{id}.
func (r *rig) get(id string) RunStatus {
	r.t.Helper()
	resp, body := r.do("GET", "/v1/runs/"+id, nil, testToken)
	var st RunStatus
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &st) != nil {
		r.t.Fatalf("GET %s: %d %s", id, resp.StatusCode, body)
	}
	return st
}

// post is POST /v1/runs with req, which must be accepted.
func (r *rig) post(req RunRequest) RunStatus {
	r.t.Helper()
	resp, body := r.do("POST", "/v1/runs", req, testToken)
	var st RunStatus
	if (resp.StatusCode != http.StatusCreated && resp.StatusCode != http.StatusOK) || json.Unmarshal(body, &st) != nil {
		r.t.Fatalf("POST %s: %d %s", req.RunID, resp.StatusCode, body)
	}
	return st
}
