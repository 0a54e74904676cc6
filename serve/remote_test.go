package serve

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

func TestRemoteRun(t *testing.T) {
	r := newRig(t, rigOpts{})
	rem, err := NewRemote(r.http.URL, testToken)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	st, err := rem.Run(context.Background(), RunRequest{RunID: "remote-1", Queue: "h100", Payload: testPayload(t)}, func(e client.Event) { kinds = append(kinds, e.Kind) })
	if err != nil || st.Status != StatusObtained || !st.Result.Success {
		t.Fatalf("%+v %v", st, err)
	}
	if len(kinds) == 0 || kinds[0] != "created" {
		t.Errorf("events %v", kinds)
	}
	for _, k := range kinds {
		if k == "done" {
			t.Error("the done event is the caller's to print, not passed on")
		}
	}
	bad, _ := NewRemote(r.http.URL, "wrong")
	_, err = bad.Run(context.Background(), RunRequest{RunID: "remote-2", Queue: "h100", Payload: testPayload(t)}, func(client.Event) {})
	var refused *RefusedError
	if !errors.As(err, &refused) || refused.Status != http.StatusUnauthorized {
		t.Fatalf("wrong token: %v", err)
	}
	if _, err := NewRemote("ftp://x", ""); err == nil {
		t.Error("an ftp URL was accepted")
	}
}

// TestRemoteInterrupt: a canceled context (SIGINT of submit --server)
// cancels the run and returns its final status.
func TestRemoteInterrupt(t *testing.T) {
	r := newRig(t, rigOpts{script: fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Never: true}})
	rem, _ := NewRemote(r.http.URL, testToken)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := rem.Run(ctx, RunRequest{RunID: "remote-int", Queue: "h100", Payload: testPayload(t)}, func(e client.Event) {
		if e.Kind == "state" && e.State == "running" || e.Kind == "created" {
			go func() { time.Sleep(200 * time.Millisecond); cancel() }()
		}
	})
	if err != nil || st.Status != StatusTimedOut || !strings.Contains(st.Result.Error, "was canceled") || st.BuildState != "canceled" {
		t.Fatalf("%+v %v", st, err)
	}
	if why := r.canceledEvent("remote-int"); why != "canceled by the client" {
		t.Errorf("canceled event says %q", why)
	}
	if n := r.fake.CountRequests("PUT", "/cancel"); n != 1 {
		t.Errorf("%d cancel requests", n)
	}
}

// TestRemoteSkipsHeartbeats: kbgen submit --server's client passes no
// heartbeat line on as an event and does not count it: a run quiet for 15
// heartbeats ends as it would without them.
func TestRemoteSkipsHeartbeats(t *testing.T) {
	sc := fastScript
	sc.Finish = 1500 * time.Millisecond
	r := newRig(t, rigOpts{script: sc, heartbeat: 50 * time.Millisecond, pollEvery: 200 * time.Millisecond})
	rem, _ := NewRemote(r.http.URL, testToken)
	var kinds []string
	st, err := rem.Run(context.Background(), RunRequest{RunID: "beats", Queue: "h100", Payload: testPayload(t)}, func(e client.Event) {
		kinds = append(kinds, e.Kind)
	})
	if err != nil || st.Status != StatusObtained {
		t.Fatalf("%+v %v", st, err)
	}
	for _, k := range kinds {
		if k == HeartbeatKind {
			t.Fatalf("the client passed a heartbeat on as an event: %v", kinds)
		}
	}
}
