package roster

import (
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func states(r *Roster) map[string]string {
	out := map[string]string{}
	for _, a := range r.List() {
		out[a.Name] = a.State()
	}
	return out
}

// TestLostAndBack: an agent missing from the list for LostAfter is lost,
// a lost webhook makes it lost at once, and the list or a connected
// webhook brings it back.
func TestLostAndBack(t *testing.T) {
	t.Parallel()
	r := New()
	var changes []Agent
	r.OnChange = func(a Agent) { changes = append(changes, a) }
	r.Connected([]Seen{{Name: "a0", Queue: "q"}, {Name: "a1", Queue: "q", Busy: true}, {Name: "a2", Queue: "q", Paused: true}}, t0)
	for _, tc := range []struct {
		name string
		step func()
		want map[string]string
	}{
		{"listed", func() {}, map[string]string{"a0": "idle", "a1": "busy", "a2": "paused"}},
		{"a1 missing, not yet lost", func() {
			r.Connected([]Seen{{Name: "a0", Queue: "q"}, {Name: "a2", Queue: "q", Paused: true}}, t0.Add(5*time.Minute))
		},
			map[string]string{"a0": "idle", "a1": "busy", "a2": "paused"}},
		{"a1 missing for LostAfter", func() {
			r.Connected([]Seen{{Name: "a0", Queue: "q"}, {Name: "a2", Queue: "q", Paused: true}}, t0.Add(DefaultLostAfter))
		},
			map[string]string{"a0": "idle", "a1": "lost", "a2": "paused"}},
		{"a0 lost by webhook", func() { r.Event(EventLost, "a0", "", t0.Add(11*time.Minute)) },
			map[string]string{"a0": "lost", "a1": "lost", "a2": "paused"}},
		{"a0 connects again", func() { r.Event(EventConnected, "a0", "q", t0.Add(12*time.Minute)) },
			map[string]string{"a0": "idle", "a1": "lost", "a2": "paused"}},
		{"a1 listed again", func() {
			r.Connected([]Seen{{Name: "a0", Queue: "q"}, {Name: "a1", Queue: "q"}}, t0.Add(13*time.Minute))
		},
			map[string]string{"a0": "idle", "a1": "idle", "a2": "paused"}}, // a2 last listed 3 minutes ago
	} {
		tc.step()
		if got := states(r); !equal(got, tc.want) {
			t.Fatalf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if len(changes) == 0 {
		t.Error("no change handed to OnChange")
	}
	if r.Event("agent.blocked", "a0", "", t0) {
		t.Error("an event the roster does not follow was taken")
	}
}

// TestQuarantineAndFacts: a quarantine makes the agent unavailable with
// its note; facts fill its node and GPUs; Load restores a roster.
func TestQuarantineAndFacts(t *testing.T) {
	t.Parallel()
	r := New()
	r.Connected([]Seen{{Name: "a0", Queue: "q"}, {Name: "a1", Queue: "q"}}, t0)
	r.Quarantined("a0", "3 machine faults in an hour", t0.Add(time.Hour), t0)
	r.Facts(runfacts.Facts{Agent: "a1", Queue: "q", Node: "n1", GPUUUIDs: []string{"GPU-1"}, GPUModel: "H100"}, t0)
	if u := r.Unavailable("q"); !u["a0"] || u["a1"] {
		t.Fatalf("unavailable %v, want a0 only", u)
	}
	saved := r.List()
	r2 := New()
	r2.Load(saved)
	got := r2.List()
	if len(got) != 2 || !got[0].Quarantined || got[0].PauseNote != "3 machine faults in an hour" || got[1].Node != "n1" || got[1].GPUUUIDs[0] != "GPU-1" || got[1].LastJob.IsZero() {
		t.Fatalf("restored %+v", got)
	}
	r2.Resumed("a0", t0)
	if u := r2.Unavailable("q"); len(u) != 0 {
		t.Errorf("unavailable after resume: %v", u)
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestInstallTags: the node and GPUs node install tagged an agent with
// fill the roster from the agent list (a change for the store and the
// metrics, once); a run's facts then win, and the tags no longer
// overwrite them.
func TestInstallTags(t *testing.T) {
	t.Parallel()
	r := New()
	changes := 0
	r.OnChange = func(Agent) { changes++ }
	seen := []Seen{{Name: "n7-gpu3", Queue: "q", Node: "n7", GPUs: []string{"GPU-a"}}}
	r.Connected(seen, t0)
	r.Connected(seen, t0.Add(time.Minute))
	if l := r.List(); len(l) != 1 || l[0].Node != "n7" || len(l[0].GPUUUIDs) != 1 || l[0].GPUUUIDs[0] != "GPU-a" || changes != 1 {
		t.Fatalf("after the list: %+v, %d changes; want n7 with GPU-a, one change", l, changes)
	}
	r.Facts(runfacts.Facts{Agent: "n7-gpu3", Queue: "q", Node: "n7", GPUUUIDs: []string{"GPU-b"}}, t0.Add(2*time.Minute))
	r.Connected(seen, t0.Add(3*time.Minute))
	if l := r.List(); l[0].GPUUUIDs[0] != "GPU-b" {
		t.Errorf("the tags overwrote the facts: %+v", l[0])
	}
}
