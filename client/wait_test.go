package client

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

// TestDefaultSchedule checks the poll schedule's budget: a poll every
// second at first, never faster, never slower than 5 s, and few enough
// polls that a 60-second build stays under 40 API requests in all.
func TestDefaultSchedule(t *testing.T) {
	t.Parallel()
	if got := DefaultSchedule(0); got != time.Second {
		t.Errorf("first interval = %s, want 1s", got)
	}
	prev := time.Duration(0)
	polls := 0 // the create response counts as the poll at 0 s
	for el := DefaultSchedule(0); el < 60*time.Second+DefaultSchedule(60*time.Second); el += DefaultSchedule(el) {
		polls++
	}
	// create + polls + artifact list + download redirect
	if total := 1 + polls + 2; total >= 40 {
		t.Errorf("a 60 s build takes %d API requests, want < 40", total)
	}
	for el := time.Duration(0); el < time.Hour; el += 100 * time.Millisecond {
		d := DefaultSchedule(el)
		if d < prev {
			t.Fatalf("interval shrinks at %s: %s after %s", el, d, prev)
		}
		if d < time.Second || d > 5*time.Second {
			t.Fatalf("interval at %s = %s, want within [1s, 5s]", el, d)
		}
		prev = d
	}
	// Under 90 s, the interval bounds the delay from passed to printed:
	// the median delay is half of it.
	if d := DefaultSchedule(60 * time.Second); d >= 2*time.Second {
		t.Errorf("interval at 60 s = %s; median latency would reach 1 s", d)
	}
}

func TestWaitStopsPollingAtFinish(t *testing.T) {
	t.Parallel()
	r := newRig(t, fakebuildkite.QuickScript)
	out := r.submit(t, context.Background(), 0)
	if out.Status != Obtained {
		t.Fatal(out.Result.Error)
	}
	late := r.clock.Now().Sub(r.fake.PassedAt(1))
	if late < 0 || late > DefaultSchedule(4*time.Second) {
		t.Errorf("result came %s after the build passed, want within one poll interval", late)
	}
}

// BenchmarkSubmit60s measures, against the fake Buildkite on a virtual
// clock, a submission whose build passes 59.0 to 60.7 s after it is
// created (the phase spread evenly over one 1.8 s poll interval, as real
// end times fall) after it is created: the delay from `passed` to the
// result being returned (virtual poll delay + real request time), and the
// requests made. Run:
//
//	go test ./client -run '^$' -bench Submit60s -benchtime 200x
func BenchmarkSubmit60s(b *testing.B) {
	var latencies []time.Duration
	var apiReqs, storageReqs int64
	for i := 0; i < b.N; i++ {
		sc := fakebuildkite.Script{BootStart: time.Second, Uploaded: 4 * time.Second, EvalStart: 6 * time.Second,
			Finish: 59*time.Second + time.Duration(i%18)*100*time.Millisecond}
		clock := NewFakeClock(epoch)
		fake := fakebuildkite.New(clock.Now)
		fake.SetScript(sc)
		c, err := New(Options{APIURL: fake.URL(), Org: fake.Org, Pipeline: fake.Pipeline, Token: fake.Token, Clock: clock})
		if err != nil {
			b.Fatal(err)
		}
		var sawPassed time.Time
		w := WaitOptions{OnEvent: func(e Event) {
			if e.Kind == "state" && e.State == StatePassed {
				sawPassed = time.Now()
			}
		}}
		out := c.Submit(context.Background(), testSubmission(b), w)
		realTail := time.Since(sawPassed)
		if out.Status != Obtained {
			b.Fatalf("status %v: %s", out.Status, out.Result.Error)
		}
		latencies = append(latencies, clock.Now().Sub(fake.PassedAt(out.Build.Number))+realTail)
		api, storage := c.Requests()
		apiReqs += api
		storageReqs += storage
		fake.Close()
	}
	sort.Slice(latencies, func(i, j int) bool { return latencies[i] < latencies[j] })
	b.ReportMetric(float64(latencies[len(latencies)/2])/1e6, "median-ms-passed-to-result")
	b.ReportMetric(float64(latencies[len(latencies)-1])/1e6, "max-ms-passed-to-result")
	b.ReportMetric(float64(apiReqs)/float64(b.N), "api-requests/op")
	b.ReportMetric(float64(storageReqs)/float64(b.N), "storage-requests/op")
}
