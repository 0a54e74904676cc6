package alert

import (
	"slices"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/roster"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
)

// TestRecentFacts: runs and waits count within the window only, an agent
// the roster says is lost is lost (until ForgetLost), paused and lost
// agents are not online, a queue's p95 is nearest-rank, and a queue's
// oldest waiting job comes through.
func TestRecentFacts(t *testing.T) {
	t.Parallel()
	r := NewRecent()
	fault, ok := 75, 0
	r.Run(at(0), runfacts.Facts{Agent: "old", Queue: "q", Noise: "noisy"})
	for i := range 4 {
		r.Run(at(10*time.Minute), runfacts.Facts{Agent: "a0", Queue: "q", Node: "n0", KbgenVersion: "v2", Noise: []string{"noisy", "clean"}[i%2], Exit: []*int{&fault, &ok}[i%2]})
	}
	r.Run(at(10*time.Minute), runfacts.Facts{Queue: "q"}) // no agent: not counted
	for i := 1; i <= 20; i++ {
		r.Wait(at(10*time.Minute), "q", time.Duration(i)*time.Second)
	}
	r.Wait(at(0), "q", time.Hour) // out of the window by then
	lostAt := at(15 * time.Minute)
	listed := []roster.Agent{{Name: "a0", Queue: "q", Node: "n-old", KbgenVersion: "v1"}, {Name: "a1", Queue: "q", Lost: true, LostAt: lostAt},
		{Name: "p", Queue: "r", Paused: true}, {Name: "gone", Queue: "q", Lost: true, LostAt: at(15*time.Minute - ForgetLost - time.Second)}}
	f := r.Facts(at(20*time.Minute), View{Known: true, Queues: []string{"q", "r", "empty"}, Agents: listed, Oldest: map[string]time.Duration{"r": 3 * time.Minute}})

	wantQ := []Queue{{Name: "empty"}, {Name: "q", Online: 1, WaitP95: 19 * time.Second, WaitKnown: true}, {Name: "r", Oldest: 3 * time.Minute}}
	if !slices.Equal(f.Queues, wantQ) {
		t.Errorf("queues %+v, want %+v", f.Queues, wantQ)
	}
	wantA := []Agent{
		{Name: "a0", Queue: "q", Node: "n0", Kbgen: "v2", Runs: 4, Noisy: 2, Faults: 2},
		{Name: "a1", Queue: "q", Lost: true},
		{Name: "p", Queue: "r"},
	}
	if !slices.Equal(f.Agents, wantA) {
		t.Errorf("agents %+v, want %+v", f.Agents, wantA)
	}
	if !f.AgentsKnown || !f.RunsKnown {
		t.Errorf("known flags %v %v, want both", f.AgentsKnown, f.RunsKnown)
	}
	later := r.Facts(lostAt.Add(ForgetLost+time.Second), View{Known: true, Agents: listed})
	for _, a := range later.Agents {
		if a.Name == "a1" {
			t.Errorf("agent a1 still %+v after ForgetLost", a)
		}
	}
}

// TestRecentImages: no image facts are known before a run reports one
// (nil ImagePulled, or no node, is no report); the latest report per
// (node, queue) stands past Window, a later one replaces it, and one
// older than ForgetLost is forgotten (still known: the source reported).
func TestRecentImages(t *testing.T) {
	t.Parallel()
	r := NewRecent()
	missing, pulled := false, true
	r.Run(at(0), runfacts.Facts{Node: "n1", Queue: "q", ImageDigest: "sha256:ab"})
	r.Run(at(0), runfacts.Facts{Queue: "q", ImageDigest: "sha256:ab", ImagePulled: &missing})
	if f := r.Facts(at(0), View{}); f.ImagesKnown || f.Images != nil {
		t.Fatalf("before any report: known %v, images %+v; want unknown, none", f.ImagesKnown, f.Images)
	}
	r.Run(at(0), runfacts.Facts{Node: "n2", Queue: "q", ImageDigest: "sha256:ab", ImagePulled: &missing})
	r.Run(at(time.Minute), runfacts.Facts{Node: "n1", Queue: "q", ImageDigest: "sha256:ab", ImagePulled: &missing})
	r.Run(at(2*time.Minute), runfacts.Facts{Node: "n1", Queue: "q", ImageDigest: "sha256:ab", ImagePulled: &pulled})
	r.Run(at(2*time.Minute), runfacts.Facts{Node: "n1", Queue: "r", ImageDigest: "rocm/x:1", ImagePulled: &missing})
	f := r.Facts(at(time.Hour), View{})
	want := []Image{{Node: "n1", Queue: "q", Image: "sha256:ab", Pulled: true}, {Node: "n1", Queue: "r", Image: "rocm/x:1"}, {Node: "n2", Queue: "q", Image: "sha256:ab"}}
	if !f.ImagesKnown || !slices.Equal(f.Images, want) {
		t.Errorf("known %v, images %+v; want known, %+v", f.ImagesKnown, f.Images, want)
	}
	f = r.Facts(at(time.Minute+ForgetLost+time.Second), View{})
	want = []Image{{Node: "n1", Queue: "q", Image: "sha256:ab", Pulled: true}, {Node: "n1", Queue: "r", Image: "rocm/x:1"}}
	if !f.ImagesKnown || !slices.Equal(f.Images, want) {
		t.Errorf("after ForgetLost: known %v, images %+v; want known, %+v", f.ImagesKnown, f.Images, want)
	}
}
