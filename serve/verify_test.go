package serve

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/fleet/verify"
	"github.com/gpu-mode/kbgen/internal/contract"
)

// verifyRun submits run id (on the untargeted agent), waits for it, and
// asks for its re-measurement on count agents.
func (r *rig) verifyRun(id string, count int) (*http.Response, []byte) {
	r.t.Helper()
	r.submit(id)
	if st := r.await(id, 10*time.Second); st.Status != StatusObtained {
		r.t.Fatalf("%s: %+v", id, st)
	}
	return r.do("POST", "/v1/runs/"+id+"/verify", VerifyRequest{Count: count}, testToken)
}

// awaitVerify polls GET /v1/runs/{id}/verify until it has a verdict.
func (r *rig) awaitVerify(id string) verify.Report {
	r.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		resp, body := r.do("GET", "/v1/runs/"+id+"/verify", nil, testToken)
		var rep verify.Report
		if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &rep) == nil && rep.Verdict != verify.Running {
			return rep
		}
		time.Sleep(20 * time.Millisecond)
	}
	r.t.Fatalf("verification of %s not done; log:\n%s", id, r.log.String())
	return verify.Report{}
}

// TestVerify: a finished run is re-run on N other agents of its hardware
// (each build targeted at one, never the run's own agent) and the
// spread of the scores is judged against the noise record's bound.
func TestVerify(t *testing.T) {
	for _, tc := range []struct {
		name    string
		scores  map[string][]float64
		count   int
		verdict string
		spread  float64
	}{
		{name: "confirmed", scores: map[string][]float64{untargeted: {1000}, "node1-gpu0": {1010}, "node2-gpu0": {995}, "node3-gpu0": {1003}},
			count: 3, verdict: verify.Confirmed, spread: 15.0 / 1001.5},
		{name: "disputed", scores: map[string][]float64{untargeted: {1000}, "node1-gpu0": {1100}, "node2-gpu0": {1090}, "node3-gpu0": {1095}},
			count: 3, verdict: verify.Disputed, spread: 100.0 / 1092.5},
		{name: "a noisy re-run leaves it inconclusive", scores: map[string][]float64{untargeted: {1000}, "node1-gpu0": {1001}, "node2-gpu0": {-999}},
			count: 2, verdict: verify.Inconclusive, spread: 1.0 / 1000.5},
		{name: "too few agents", scores: map[string][]float64{untargeted: {1000}, "node1-gpu0": {1001}},
			count: 3, verdict: verify.Inconclusive, spread: 1.0 / 1000.5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &canaryFleet{scores: tc.scores, served: map[string]int{}}
			r := newCanaryRig(t, f, 0, false)
			if resp, body := r.verifyRun("rec1", tc.count); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST verify: %d %s", resp.StatusCode, body)
			}
			rep := r.awaitVerify("rec1")
			if rep.Verdict != tc.verdict || rep.Bound != 0.06 || abs(rep.Spread-tc.spread) > 1e-9 || rep.Original.Agent != untargeted {
				t.Errorf("report %+v; want %s, spread %v, bound 0.06", rep, tc.verdict, tc.spread)
			}
			var agents []string
			for _, env := range f.envs {
				if a := env[contract.EnvTargetAgent]; a != "" {
					agents = append(agents, a)
				}
			}
			slices.Sort(agents)
			var others []string
			for a := range tc.scores {
				if a != untargeted {
					others = append(others, a)
				}
			}
			slices.Sort(others)
			if !slices.Equal(agents, others[:min(tc.count, len(others))]) {
				t.Errorf("re-runs targeted %v, want one each on %v", agents, others)
			}
			// Asking again returns the same verification, no new builds.
			builds := r.fake.CountRequests("POST", "/builds")
			if resp, _ := r.do("POST", "/v1/runs/rec1/verify", VerifyRequest{Count: tc.count}, testToken); resp.StatusCode != http.StatusAccepted || r.fake.CountRequests("POST", "/builds") != builds {
				t.Errorf("a second POST: %d, builds %d → %d", resp.StatusCode, builds, r.fake.CountRequests("POST", "/builds"))
			}
		})
	}
}

// TestVerifyRefused: what cannot be re-measured is a 409 that says why.
func TestVerifyRefused(t *testing.T) {
	f := &canaryFleet{scores: map[string][]float64{untargeted: {1000}}, served: map[string]int{}}
	r := newCanaryRig(t, f, 0, false)
	for _, tc := range []struct {
		name, id, want string
		setup          func()
	}{
		{name: "no such run", id: "nope", want: "cannot verify: no run"},
		{name: "no other agent", id: "alone", want: "no other available agent", setup: func() { r.submit("alone"); r.await("alone", 10*time.Second) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.setup != nil {
				tc.setup()
			}
			resp, body := r.do("POST", "/v1/runs/"+tc.id+"/verify", nil, testToken)
			if resp.StatusCode != http.StatusConflict || !strings.Contains(string(body), tc.want) {
				t.Errorf("%d %s; want 409 naming %q", resp.StatusCode, body, tc.want)
			}
		})
	}
	if resp, _ := r.do("GET", "/v1/runs/nope/verify", nil, testToken); resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET of no verification: %d, want 404", resp.StatusCode)
	}
	if resp, _ := r.do("POST", "/v1/runs/alone/verify", nil, ""); resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("POST without the token: %d, want 401", resp.StatusCode)
	}
}

func abs(x float64) float64 { return max(x, -x) }

// TestRemoteVerify: kbgen verify's client starts the re-measurement and
// waits for its verdict.
func TestRemoteVerify(t *testing.T) {
	f := &canaryFleet{scores: map[string][]float64{untargeted: {1000}, "node1-gpu0": {1002}}, served: map[string]int{}}
	r := newCanaryRig(t, f, 0, false)
	r.submit("rec9")
	r.await("rec9", 10*time.Second)
	rem, err := NewRemote(r.http.URL, testToken)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	rep, err := rem.Verify(ctx, "rec9", 1, 20*time.Millisecond)
	if err != nil || rep.Verdict != verify.Confirmed || len(rep.Reruns) != 1 || rep.Reruns[0].Agent != "node1-gpu0" {
		t.Fatalf("Verify = %+v, %v; want confirmed by node1-gpu0", rep, err)
	}
	var refused *RefusedError
	if _, err := rem.Verify(ctx, "none", 1, time.Millisecond); !errors.As(err, &refused) || refused.Status != http.StatusConflict {
		t.Errorf("Verify of no run: %v, want a 409 refusal", err)
	}
}

// TestVerifyRestart: a verification survives a restart of kbgen serve on
// the same store: one killed while its re-runs run, and one done, read
// the same report (and a POST again starts nothing new) from the
// restarted service.
func TestVerifyRestart(t *testing.T) {
	for _, tc := range []struct {
		name string
		slow time.Duration // the re-runs' added run time
		mid  bool          // restart before the re-runs finish
	}{
		{name: "after the verdict"},
		{name: "while the re-runs run", slow: 1500 * time.Millisecond, mid: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := fleetstore.Open(context.Background(), fleetstore.Options{Path: filepath.Join(t.TempDir(), "s.db"), Service: "kbgen"})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			f := &canaryFleet{scores: map[string][]float64{untargeted: {1000}, "node1-gpu0": {1010}, "node2-gpu0": {995}}, served: map[string]int{}, slow: tc.slow}
			r := newCanaryRigWith(t, f, rigOpts{store: st})
			if resp, body := r.verifyRun("rec1", 2); resp.StatusCode != http.StatusAccepted {
				t.Fatalf("POST verify: %d %s", resp.StatusCode, body)
			}
			var before verify.Report
			if tc.mid {
				waitFor(t, "the re-runs' builds", func() bool { return r.fake.CountRequests("POST", "/builds") == 3 })
				waitFor(t, "the verification kept", func() bool { recs, _ := st.Verifications(context.Background(), time.Time{}); return len(recs) == 1 })
			} else {
				before = r.awaitVerify("rec1")
				waitFor(t, "the re-runs kept", func() bool {
					recs, _ := st.Verifications(context.Background(), time.Time{})
					return len(recs) == 1 && !recs[0].Pending()
				})
			}
			r.stop()
			again := newRig(t, rigOpts{fake: r.fake, store: st})
			after := again.awaitVerify("rec1")
			if after.Verdict != verify.Confirmed || len(after.Reruns) != 2 || abs(after.Spread-15.0/1000) > 1e-9 {
				t.Errorf("after the restart: %+v; want confirmed by both re-runs, spread 1.5 %%", after)
			}
			if !tc.mid && !reflect.DeepEqual(before, after) {
				t.Errorf("the report changed across the restart:\n before %+v\n after  %+v", before, after)
			}
			builds := again.fake.CountRequests("POST", "/builds")
			if resp, _ := again.do("POST", "/v1/runs/rec1/verify", VerifyRequest{Count: 2}, testToken); resp.StatusCode != http.StatusAccepted || again.fake.CountRequests("POST", "/builds") != builds {
				t.Errorf("a POST after the restart: %d, builds %d → %d; want the kept verification", resp.StatusCode, builds, again.fake.CountRequests("POST", "/builds"))
			}
		})
	}
}
