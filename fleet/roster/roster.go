// Package roster is every agent kbgen serve has seen: in Buildkite's
// agent list (the queue view), in a run's facts, or in an agent webhook;
// kept across restarts through the store. It says which agents are lost
// (Buildkite's agent.lost / agent.disconnected webhooks, or absent from
// the agent list for LostAfter) and which are paused (by Buildkite, or
// quarantined by kbgen serve with a note and a timeout), so that the
// queue status Kernelbot reads counts neither as available.
package roster

import (
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
)

// DefaultLostAfter is how long an agent may be missing from Buildkite's
// agent list (which lists connected agents only) before it is lost.
const DefaultLostAfter = 10 * time.Minute

// MaxAgents bounds the roster: an agent name comes from the agent host.
const MaxAgents = 4096

// Agent is one agent as the roster knows it.
type Agent struct {
	Name         string    `json:"name"`
	Queue        string    `json:"queue"`
	Node         string    `json:"node,omitempty"`
	GPUUUIDs     []string  `json:"gpu_uuids,omitempty"`
	GPUModel     string    `json:"gpu_model,omitempty"`
	Driver       string    `json:"driver,omitempty"`
	KbgenVersion string    `json:"kbgen_version,omitempty"`
	FirstSeen    time.Time `json:"first_seen"`
	LastSeen     time.Time `json:"last_seen"` // connected in the agent list, or a run's facts
	LastJob      time.Time `json:"last_job,omitzero"`
	Busy         bool      `json:"busy"`
	// Lost: gone (a webhook, or absent LostAfter); LostWhy says which.
	Lost    bool      `json:"lost"`
	LostAt  time.Time `json:"lost_at,omitzero"`
	LostWhy string    `json:"lost_why,omitempty"`
	// Paused in Buildkite; Quarantined when kbgen serve paused it, with
	// its note and when the pause ends.
	Paused      bool      `json:"paused"`
	Quarantined bool      `json:"quarantined,omitempty"`
	PauseNote   string    `json:"pause_note,omitempty"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
}

// State is the agent's state in kbgen_agents' words.
func (a Agent) State() string {
	switch {
	case a.Lost:
		return "lost"
	case a.Paused:
		return "paused"
	case a.Busy:
		return "busy"
	}
	return "idle"
}

// Seen is one connected agent in Buildkite's agent list, with the
// identity `kbgen node install` tagged it with (contract.NodeTag,
// contract.GPUsTag; empty for an agent installed otherwise).
type Seen struct {
	Name, Queue  string
	Busy, Paused bool
	Node         string
	GPUs         []string
}

// Roster is the agents by name. Changed agents are handed to OnChange
// (the store), outside the lock.
type Roster struct {
	LostAfter time.Duration
	OnChange  func(Agent)

	mu     sync.Mutex
	agents map[string]*Agent
}

// New returns an empty roster.
func New() *Roster { return &Roster{LostAfter: DefaultLostAfter, agents: map[string]*Agent{}} }

// Load puts agents kept by an earlier run of the service back.
func (r *Roster) Load(agents []Agent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range agents {
		if len(r.agents) < MaxAgents && a.Name != "" {
			r.agents[a.Name] = &a
		}
	}
}

// get is the agent named name, made when new (nil past MaxAgents); r.mu
// is held.
func (r *Roster) get(name string, at time.Time) *Agent {
	name = runfacts.Text(strings.TrimSpace(name), 128)
	if name == "" {
		return nil
	}
	a := r.agents[name]
	if a == nil {
		if len(r.agents) >= MaxAgents {
			return nil
		}
		a = &Agent{Name: name, FirstSeen: at}
		r.agents[name] = a
	}
	return a
}

// change applies f to each named agent under the lock, then hands every
// agent f changed to OnChange.
func (r *Roster) change(f func() []*Agent) {
	r.mu.Lock()
	var out []Agent
	for _, a := range f() {
		if a != nil {
			out = append(out, *a)
		}
	}
	r.mu.Unlock()
	if r.OnChange != nil {
		for _, a := range out {
			r.OnChange(a)
		}
	}
}

// Connected takes Buildkite's agent list at at: each listed agent is
// connected (not lost) with its queue, busy and paused; an agent of the
// roster missing from it for LostAfter is lost.
func (r *Roster) Connected(list []Seen, at time.Time) {
	r.change(func() []*Agent {
		var changed []*Agent
		listed := map[string]bool{}
		for _, s := range list {
			a := r.get(s.Name, at)
			if a == nil {
				continue
			}
			listed[a.Name] = true
			was := *a
			a.Queue, a.Busy, a.Paused, a.LastSeen = runfacts.Text(s.Queue, 128), s.Busy, s.Paused, at
			tagged := a.tagged(s)
			a.Lost, a.LostWhy, a.LostAt = false, "", time.Time{}
			if !s.Paused {
				a.Quarantined, a.PauseNote, a.PausedUntil = false, "", time.Time{}
			}
			if tagged || was.Lost != a.Lost || was.Paused != a.Paused || was.Queue != a.Queue || was.Busy != a.Busy || was.FirstSeen.Equal(at) {
				changed = append(changed, a)
			}
		}
		for _, a := range r.agents {
			if !listed[a.Name] && !a.Lost && at.Sub(a.LastSeen) >= r.LostAfter {
				a.Lost, a.LostAt, a.LostWhy, a.Busy = true, at, "absent from Buildkite's agent list since "+a.LastSeen.UTC().Format(time.RFC3339), false
				changed = append(changed, a)
			}
		}
		return changed
	})
}

// tagged takes the install's identity from the agent list until a run's
// facts give the agent's own (they win: they are what the job ran on);
// it reports whether anything changed.
func (a *Agent) tagged(s Seen) bool {
	if !a.LastJob.IsZero() || s.Node == "" && len(s.GPUs) == 0 {
		return false
	}
	node := runfacts.Text(s.Node, 128)
	var gpus []string
	for _, g := range s.GPUs[:min(len(s.GPUs), maxTaggedGPUs)] {
		gpus = append(gpus, runfacts.Text(g, 128))
	}
	if a.Node == node && slices.Equal(a.GPUUUIDs, gpus) {
		return false
	}
	a.Node, a.GPUUUIDs = node, gpus
	return true
}

// maxTaggedGPUs bounds the GPUs one agent's tag may name (an 8-GPU
// agent is the largest shape).
const maxTaggedGPUs = 16

// Facts takes a run's facts: the agent's node, GPUs and versions, and its
// last job.
func (r *Roster) Facts(f runfacts.Facts, at time.Time) {
	r.change(func() []*Agent {
		a := r.get(f.Agent, at)
		if a == nil {
			return nil
		}
		if f.Queue != "" {
			a.Queue = f.Queue
		}
		a.Node, a.GPUUUIDs, a.GPUModel, a.Driver, a.KbgenVersion = f.Node, slices.Clone(f.GPUUUIDs), f.GPUModel, f.Driver, f.KbgenVersion
		a.LastJob = at
		return []*Agent{a}
	})
}

// Agent webhook events (pages/apis/webhooks/pipelines.md: agent.connected,
// agent.lost, agent.disconnected, agent.stopping, agent.stopped,
// agent.blocked).
const (
	EventConnected    = "agent.connected"
	EventLost         = "agent.lost"
	EventDisconnected = "agent.disconnected"
	EventStopped      = "agent.stopped"
)

// Event takes an agent webhook; it reports whether the event is one the
// roster follows.
func (r *Roster) Event(event, name, queue string, at time.Time) bool {
	switch event {
	case EventConnected, EventLost, EventDisconnected, EventStopped:
	default:
		return false
	}
	r.change(func() []*Agent {
		a := r.get(name, at)
		if a == nil {
			return nil
		}
		if queue != "" {
			a.Queue = runfacts.Text(queue, 128)
		}
		if event == EventConnected {
			a.Lost, a.LostWhy, a.LostAt, a.LastSeen = false, "", time.Time{}, at
		} else {
			a.Lost, a.LostAt, a.LostWhy, a.Busy = true, at, "Buildkite webhook "+event, false
		}
		return []*Agent{a}
	})
	return true
}

// Quarantined records that kbgen serve paused the agent until until.
func (r *Roster) Quarantined(name, note string, until, at time.Time) {
	r.change(func() []*Agent {
		a := r.get(name, at)
		if a == nil {
			return nil
		}
		a.Paused, a.Quarantined, a.PauseNote, a.PausedUntil = true, true, note, until
		return []*Agent{a}
	})
}

// Resumed records that kbgen serve resumed the agent.
func (r *Roster) Resumed(name string, at time.Time) {
	r.change(func() []*Agent {
		a := r.get(name, at)
		if a == nil {
			return nil
		}
		a.Paused, a.Quarantined, a.PauseNote, a.PausedUntil = false, false, "", time.Time{}
		return []*Agent{a}
	})
}

// List is every agent, by queue then name.
func (r *Roster) List() []Agent {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Agent, 0, len(r.agents))
	for _, a := range r.agents {
		c := *a
		c.GPUUUIDs = slices.Clone(a.GPUUUIDs)
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b Agent) int {
		if c := strings.Compare(a.Queue, b.Queue); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// Unavailable is the agents of queue that Buildkite may still list as
// idle but the roster knows are lost or quarantined (a webhook newer
// than the list), by name.
func (r *Roster) Unavailable(queue string) map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, a := range r.agents {
		if a.Queue == queue && (a.Lost || a.Paused) {
			out[a.Name] = true
		}
	}
	return out
}
