package metrics

import (
	"fmt"
	"io"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
)

// BenchmarkScrape100Agents is one /metrics scrape of a fleet of 100
// agents on 10 queues after 1000 runs (an hour at the rate), with
// 50 jobs in flight: the target is under 50 ms (docs/performance.md).
func BenchmarkScrape100Agents(b *testing.B) {
	r := New()
	now := time.Now()
	var jobs []Job
	for i := range 50 {
		jobs = append(jobs, Job{Queue: fmt.Sprintf("q%d", i%10), State: JobStates[i%4], Runnable: now.Add(-time.Duration(i) * time.Second)})
	}
	var agents []Agent
	for i := range 100 {
		agents = append(agents, Agent{Queue: fmt.Sprintf("q%d", i%10), State: AgentStates[i%4]})
	}
	r.SetSource(func() Snapshot {
		return Snapshot{Jobs: jobs, Agents: agents, AgentsKnown: true, Budget: Budget{Limit: 100, Used: 40, OrgRemaining: 150, UserRemaining: []int{40, 41}}}
	})
	for i := range 1000 {
		q, a := fmt.Sprintf("q%d", i%10), fmt.Sprintf("node%d-gpu%d", i%100/8, i%100)
		exit := []int{0, 0, 0, 75}[i%4]
		r.RunDone(q, "obtained")
		r.QueueWait(q, time.Duration(i)*time.Millisecond)
		r.Detected(time.Duration(i%7) * 100 * time.Millisecond)
		r.APIRequest("poll", 200, "")
		r.RunFacts(runfacts.Facts{Agent: a, Queue: q, Node: a[:5], GPUUUIDs: []string{"GPU-" + a}, GPUModel: "NVIDIA H100 80GB HBM3", Driver: "550.54.15", KbgenVersion: "v1", Noise: "clean", Exit: &exit, Xids: i % 2})
	}
	h := r.Handler()
	b.ResetTimer()
	for b.Loop() {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		if rec.Code != 200 {
			b.Fatal(rec.Code)
		}
		_, _ = io.Copy(io.Discard, rec.Body)
	}
}
