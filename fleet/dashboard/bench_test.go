package dashboard

import (
	"fmt"
	"io"
	"testing"
	"time"
)

// BenchmarkRender100Agents renders the page of a fleet of 100 agents on
// 13 nodes and 10 queues with 50 runs in flight: the target is under
// 200 ms with the data gathering (docs/performance.md).
func BenchmarkRender100Agents(b *testing.B) {
	p := Page{Scope: Scope{Name: "all"}, AsOf: t0, Budget: &Budget{Limit: 100, Used: 40, OrgRemaining: 150, UserRemaining: []int{40, 41}}}
	for q := range 10 {
		p.Queues = append(p.Queues, Queue{Name: fmt.Sprintf("q%d", q), Scheduled: 3, Running: 5, WaitP50: time.Second, WaitP95: time.Minute, Agents: 10, Idle: 5, Busy: 5})
	}
	for n := range 13 {
		node := Node{Name: fmt.Sprintf("node%d", n)}
		for g := range 8 {
			if n*8+g < 100 {
				node.Agents = append(node.Agents, Agent{Name: fmt.Sprintf("node%d-gpu%d", n, g), Queue: fmt.Sprintf("q%d", g), GPU: "NVIDIA H100 80GB HBM3", State: "busy", LastJob: t0, Runs: 10, NoisyRate: .1, FaultRate: .05})
			}
		}
		p.Nodes = append(p.Nodes, node)
	}
	for i := range 50 {
		p.InFlight = append(p.InFlight, Run{ID: fmt.Sprintf("run-%d", i), Queue: "q1", State: "running", Build: i, URL: "https://buildkite.com/o/p/builds/1", Age: time.Minute})
	}
	for b.Loop() {
		if err := Render(io.Discard, p); err != nil {
			b.Fatal(err)
		}
	}
}
