package client

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

// TestResultRidesOnMetaData: the runner sends a result that fits only as
// build meta-data, stamped with its job (runner/publish.go: no artifact
// upload, whose agent loop costs a second per job), and kbgen submit reads
// it as kbgen serve does (MetaDataResult): from the build, when it is the
// latest eval job's; else from that job's artifact, or says why there is
// none. A stale first attempt's value is never reported.
func TestResultRidesOnMetaData(t *testing.T) {
	t.Parallel()
	q := fakebuildkite.QuickScript
	q.ResultInMetaData, q.MetaDataOnly = true, true
	with := func(f func(*fakebuildkite.Script)) fakebuildkite.Script { s := q; f(&s); return s }
	stale := strings.Replace(fakebuildkite.DefaultResult, `"hostname": "gpu-node-3"`, `"hostname": "stale-first-attempt"`, 1)
	tests := []struct {
		name      string
		script    fakebuildkite.Script
		status    Status
		want      string // in the result's error, its hostname or its profile's download_url
		artifacts int    // artifact requests: lists and downloads
	}{
		{"on the build, no request", q, Obtained, "gpu-node-3", 0},
		{"profile: only the list, for download_url", with(func(s *fakebuildkite.Script) {
			s.Artifacts = map[string][]byte{"result.json": []byte(profileResult), "profile_data/profile.0.zip": []byte("PK")}
		}), Obtained, "/download", 1},
		{"too large for meta-data: the artifact", with(func(s *fakebuildkite.Script) {
			s.Artifacts = map[string][]byte{"result.json": []byte(bigResult(t))}
		}), Obtained, "gpu-node-3", 2},
		{"noise retry, retry passes: its own value", with(func(s *fakebuildkite.Script) {
			s.RetryExit, s.FirstResult = 75, []byte(stale)
		}), Obtained, "gpu-node-3", 0},
		{"noise retry, retry lost: not the stale first value", with(func(s *fakebuildkite.Script) {
			s.RetryExit, s.FirstResult, s.RetryLost = 75, []byte(stale), true
		}), RunnerFailed, "the eval job failed (exit status -1) without uploading result.json", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t, tt.script)
			out := r.submit(t, context.Background(), 0)
			got := out.Result.Error + out.Result.System.Hostname + profileURL.FindString(mustJSON(t, out.Result.Runs))
			if out.Status != tt.status || !strings.Contains(got, tt.want) || strings.Contains(got, "stale") {
				t.Errorf("%v %q, want %v with %q", out.Status, got, tt.status, tt.want)
			}
			if n := r.fake.CountRequests("", "/artifacts"); n != tt.artifacts {
				t.Errorf("%d artifact requests, want %d", n, tt.artifacts)
			}
		})
	}
}

// bigResult is a passing result.json whose stdout compresses to more than
// the meta-data limit (random bytes do not compress).
func bigResult(t *testing.T) string {
	t.Helper()
	noise := make([]byte, 150<<10)
	if _, err := rand.Read(noise); err != nil {
		t.Fatal(err)
	}
	return strings.Replace(fakebuildkite.DefaultResult, `"stdout": ""`, `"stdout": "`+base64.StdEncoding.EncodeToString(noise)+`"`, 1)
}

// TestGetBuildWithRetries: a build fetched on its own lists the retried
// attempt only when asked (include_retried_jobs), as the lists do: what
// serve vouches each attempt's run facts against.
func TestGetBuildWithRetries(t *testing.T) {
	t.Parallel()
	sc := fakebuildkite.QuickScript
	sc.RetryExit, sc.FirstResult = 75, []byte(fakebuildkite.DefaultResult)
	r := newRig(t, sc)
	out := r.submit(t, context.Background(), 0)
	if out.Build == nil {
		t.Fatalf("no build: %+v", out)
	}
	for _, tc := range []struct {
		name string
		get  func(context.Context, int) (*Build, error)
		want int // eval jobs listed
	}{
		{"GetBuild: each step's latest job", r.client.GetBuild, 1},
		{"GetBuildWithRetries: the retried attempt too", r.client.GetBuildWithRetries, 2},
	} {
		b, err := tc.get(context.Background(), out.Build.Number)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		n := 0
		for _, j := range b.Jobs {
			if j.StepKey == contract.EvalStepKey {
				n++
			}
		}
		if n != tc.want {
			t.Errorf("%s: %d eval jobs, want %d", tc.name, n, tc.want)
		}
	}
}
