package serve

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/registry"
)

// outcome is what a client reads of a done run: it must not change with
// the service's restarts.
type outcome struct {
	Status, BuildState, Error string
	Build                     int
	Success                   bool
	Hostname                  string
}

func outcomeOf(st RunStatus) outcome {
	o := outcome{Status: st.Status, BuildState: st.BuildState, Build: st.Build}
	if st.Result != nil {
		o.Error, o.Success, o.Hostname = st.Result.Error, st.Result.Success, st.Result.System.Hostname
	}
	return o
}

// stop ends the service as a kill would: its HTTP server and its loops.
func (r *rig) stop() {
	r.http.Close()
	r.cancel()
}

// waitBuild waits until the run's build exists.
func (r *rig) waitBuild(id string) {
	r.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if run := r.svc.runs.get(id); run != nil {
			if build, _, _, _, _, _ := run.snapshot(); build != 0 {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	r.t.Fatalf("run %s has no build; log:\n%s", id, r.log.String())
}

// TestOutcomeSurvivesRestarts is the property of issue 27: for every way
// a run ends with a build (each terminal state, each cause of a cancel),
// the outcome a client reads is the same before and after any number of
// restarts of the service. Before the fix, a run that had timed out
// (exit 5) read runner_failed (exit 3), with another message, after one.
func TestOutcomeSurvivesRestarts(t *testing.T) {
	never := fakebuildkite.Script{BootStart: 50 * time.Millisecond, Uploaded: 100 * time.Millisecond, EvalStart: 150 * time.Millisecond, Never: true}
	failing := fastScript
	failing.Artifacts = map[string][]byte{"result.json": []byte(strings.Replace(fakebuildkite.DefaultResult, `"success": true, "error": ""`, `"success": false, "error": "the harness said no"`, 1))}
	noResult := fastScript
	noResult.EvalExit, noResult.Artifacts = 1, map[string][]byte{}
	inMeta := fastScript
	inMeta.ResultInMetaData = true
	boot := fastScript
	boot.BootstrapFails = true
	uiCancel := never
	uiCancel.CancelAt = 300 * time.Millisecond
	follow := func(r *rig, id string) {}
	tests := []struct {
		name    string
		script  fakebuildkite.Script
		timeout float64 // RunRequest.TimeoutSeconds
		orphan  time.Duration
		act     func(r *rig, id string)
		want    string
	}{
		{"obtained from the artifact", fastScript, 0, 0, follow, StatusObtained},
		{"obtained from meta-data", inMeta, 0, 0, follow, StatusObtained},
		{"runner failed with a result", failing, 0, 0, follow, StatusRunnerFailed},
		{"runner failed without a result", noResult, 0, 0, follow, StatusRunnerFailed},
		{"bootstrap failed", boot, 0, 0, follow, StatusRunnerFailed},
		{"timed out", never, 0.3, 0, follow, StatusTimedOut},
		{"canceled by its client", never, 0, 0, func(r *rig, id string) {
			r.waitBuild(id)
			r.do("DELETE", "/v1/runs/"+id, nil, testToken)
		}, StatusTimedOut},
		{"orphaned", never, 0, 300 * time.Millisecond, follow, StatusTimedOut},
		{"canceled in Buildkite", uiCancel, 0, 0, follow, StatusTimedOut},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, rigOpts{script: tc.script, orphan: tc.orphan})
			r.post(RunRequest{RunID: "p", Queue: "nvidia-h100", Payload: testPayload(t), TimeoutSeconds: tc.timeout})
			tc.act(r, "p")
			r.awaitUnseen("p", 10*time.Second)
			before := outcomeOf(r.get("p"))
			if before.Status != tc.want {
				t.Fatalf("before any restart: %+v, want %s", before, tc.want)
			}
			r.stop()
			for n := 1; n <= 3; n++ {
				again := newRig(t, rigOpts{fake: r.fake})
				after := outcomeOf(again.await("p", 10*time.Second))
				if after != before {
					t.Fatalf("after %d restarts:\n got  %+v\n want %+v", n, after, before)
				}
				if resp, body := again.do("GET", "/", nil, ""); resp.StatusCode != http.StatusOK {
					t.Errorf("restart %d: health %d %s: a restarted service is not its own twin", n, resp.StatusCode, body)
				}
				again.stop()
			}
		})
	}
}

// TestCancelBuildState: after a cancel the run's build_state is the
// build's (canceled), not the last one seen before it (issue 27: it
// stayed scheduled).
func TestCancelBuildState(t *testing.T) {
	r := newRig(t, rigOpts{script: fakebuildkite.Script{BootStart: 30 * time.Second, Uploaded: 31 * time.Second, EvalStart: 32 * time.Second, Finish: 40 * time.Second}})
	r.submit("sched")
	r.waitBuild("sched")
	resp, body := r.do("DELETE", "/v1/runs/sched", nil, testToken)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("DELETE: %d %s", resp.StatusCode, body)
	}
	if st := r.get("sched"); st.State != StateDone || st.BuildState != client.StateCanceled {
		t.Fatalf("after the cancel: state %s, build_state %q, want done, canceled", st.State, st.BuildState)
	}
}

// TestTwinServiceReported: a second service of the same name on the
// pipeline is told by the builds it creates: the first one's health
// fails (503) and says why, and its log has a WARNING.
func TestTwinServiceReported(t *testing.T) {
	a := newRig(t, rigOpts{script: slowScript})
	a.submit("a-run") // a polls only while it has runs
	b := newRig(t, rigOpts{fake: a.fake})
	b.fake.SetScript(fastScript)
	b.submit("b-run")
	b.await("b-run", 10*time.Second)
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, body := a.do("GET", "/", nil, "")
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), `another kbgen serve named \"kbgen\"`) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("health of the first service: %d %s", resp.StatusCode, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(a.log.String(), "WARNING: another kbgen serve") {
		t.Errorf("no warning in the log:\n%s", a.log.String())
	}
}

// TestRunBindsFirst: a port in use is reported at once (exit 2), before
// the startup scan's first request (issue 27: after it).
func TestRunBindsFirst(t *testing.T) {
	fake := fakebuildkite.New(nil)
	defer fake.Close()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	budget := NewBudget(100)
	c, err := client.New(client.Options{APIURL: fake.URL(), Org: fake.Org, Pipeline: fake.Pipeline, Token: fake.Token, WrapAPI: budget.Transport})
	if err != nil {
		t.Fatal(err)
	}
	reg, _ := registry.Load("")
	svc, err := New(Config{Client: c, Budget: budget, Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	e, err := ParseListen(taken.Addr().String(), testToken)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = svc.Run(ctx, e, testToken, Limits{})
	if exitcode.Of(err) != exitcode.Usage || !strings.Contains(fmt.Sprint(err), "address already in use") {
		t.Fatalf("Run on a port in use: %v (exit %d), want exit 2", err, exitcode.Of(err))
	}
	if n := fake.CountRequests("GET", "/builds"); n != 0 {
		t.Errorf("%d build list requests before the port was found in use", n)
	}
}

// TestHeartbeat: a quiet event stream carries the heartbeat line, exactly
// as docs/backend.md#the-api writes it, every Config.Heartbeat; it is no
// event (?from counts events only), and the Go client skips it.
func TestHeartbeat(t *testing.T) {
	r := newRig(t, rigOpts{script: slowScript, heartbeat: 100 * time.Millisecond})
	r.submit("quiet")
	r.waitBuild("quiet")
	ctx, cancel := context.WithTimeout(context.Background(), 750*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", r.http.URL+"/v1/runs/quiet/events", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf strings.Builder
	_, _ = io.Copy(&buf, resp.Body) // until the context ends the stream
	beats, events := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(buf.String()), "\n") {
		if line == `{"event":"heartbeat"}` {
			beats++
		} else {
			events++
		}
	}
	if beats < 3 || resp.Header.Get("X-Accel-Buffering") != "no" {
		t.Fatalf("%d heartbeats in 750ms at 100ms (X-Accel-Buffering %q):\n%s", beats, resp.Header.Get("X-Accel-Buffering"), buf.String())
	}
	run := r.svc.runs.get("quiet")
	if evs, _, _ := run.Events(0); len(evs) != events {
		t.Errorf("the stream had %d events beside its heartbeats, the run %d", events, len(evs))
	}
}

// TestStreamAlwaysEndsWithDone: a client whose ?from= is past the end of
// a done run's events (it counted a heartbeat, or its first service had
// more events than the restarted one) still reads the done event, instead
// of an empty stream it would take for a broken one and reconnect to for
// ever.
func TestStreamAlwaysEndsWithDone(t *testing.T) {
	r := newRig(t, rigOpts{})
	r.submit("end")
	r.await("end", 10*time.Second)
	n := len(r.events("end"))
	for _, from := range []int{n - 1, n, n + 7} {
		_, body := r.do("GET", fmt.Sprintf("/v1/runs/end/events?from=%d", from), nil, testToken)
		if lines := strings.Split(strings.TrimSpace(string(body)), "\n"); len(lines) != 1 || !strings.Contains(lines[0], `"event":"done"`) {
			t.Errorf("from=%d of %d events: %q, want the done event alone", from, n, body)
		}
	}
}

// TestTwinSightings: only a build of another instance created since this
// start is a twin's (an earlier life's builds are not), and a sighting
// counts for TwinMemory (a rolling update's overlap is not reported for
// ever).
func TestTwinSightings(t *testing.T) {
	clock := &fakeNow{t: time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC)}
	c, err := client.New(client.Options{APIURL: "http://127.0.0.1:1/", Org: "o", Pipeline: "p", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := New(Config{Client: c, Budget: NewBudget(100), Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	build := func(inst string, created time.Duration) *client.Build {
		return &client.Build{Number: 7, CreatedAt: svc.started.Add(created), MetaData: map[string]string{MetaDataInstance: inst}}
	}
	svc.noteForeign(build("earlier-life", -time.Minute))
	svc.noteForeign(build(svc.instance, time.Minute))
	if c := svc.Conflict(); c != "" {
		t.Fatalf("a conflict from an earlier life's build or its own: %s", c)
	}
	svc.noteForeign(build("twin", time.Minute))
	if c := svc.Conflict(); !strings.Contains(c, "instance twin") {
		t.Fatalf("conflict %q, want the twin named", c)
	}
	clock.add(TwinMemory + time.Second)
	if c := svc.Conflict(); c != "" {
		t.Fatalf("still a conflict %s after the twin's last build: %s", TwinMemory, c)
	}
}
