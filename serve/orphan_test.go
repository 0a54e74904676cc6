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

func TestOrphans(t *testing.T) {
	const grace = 300 * time.Millisecond
	tests := []struct {
		name string
		// client is what the client does after its POST; it returns
		// when the grace period has been tested.
		client     func(r *rig, id string)
		wantCancel bool
	}{
		{"stream closed, nobody re-attaches", func(r *rig, id string) {
			r.stream(id)()
		}, true},
		{"stream closed, re-attached within the grace period", func(r *rig, id string) {
			r.stream(id)()
			time.Sleep(grace / 3)
			defer r.stream(id)()
			time.Sleep(3 * grace)
		}, false},
		{"never streamed (a client that polls GET)", func(r *rig, id string) {
			time.Sleep(3 * grace)
		}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, rigOpts{orphan: grace, script: slowScript})
			r.submit("orphan")
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
			st := r.await("orphan", 5*time.Second)
			if st.Status != StatusTimedOut || !strings.Contains(st.Result.Error, "client went away") {
				t.Fatalf("orphan ended %s: %q", st.Status, st.Result.Error)
			}
			if n := r.fake.CountRequests("PUT", "/cancel"); n != 1 {
				t.Fatalf("%d cancel requests; want 1", n)
			}
		})
	}
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
