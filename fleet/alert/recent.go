package alert

import (
	"cmp"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/fleet/roster"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// Window is how far back Recent counts runs and waits: the agents' noisy
// and fault counts and the queues' wait p95 are over the last Window.
const Window = 15 * time.Minute

// ForgetLost is how long a lost agent stays lost before it is forgotten
// (its alarm then resolves): an agent removed on purpose stops alarming.
const ForgetLost = 24 * time.Hour

// Recent keeps what Facts needs beyond serve's snapshot: the recent runs'
// facts and queue waits, and each node's latest report of its queue's
// image, fed by serve's hooks (the same calls that feed the metrics).
// Which agents exist, are lost or paused is the roster's
// (fleet/roster), passed in View. Safe for concurrent use.
type Recent struct {
	mu    sync.Mutex
	runs  []recentRun
	waits []recentWait
	// images is the latest image report per (node, queue): kept past
	// Window (a node that reported its image missing has it missing
	// until a later attempt says otherwise), forgotten after ForgetLost.
	images map[imageKey]recentImage
}

type imageKey struct{ node, queue string }

type recentImage struct {
	at     time.Time
	image  string
	pulled bool
}

type recentRun struct {
	at   time.Time
	fact runfacts.Facts
}

type recentWait struct {
	at    time.Time
	queue string
	wait  time.Duration
}

// NewRecent is an empty Recent.
func NewRecent() *Recent { return &Recent{} }

// Run notes one attempt's facts, seen at now.
func (r *Recent) Run(now time.Time, f runfacts.Facts) {
	r.mu.Lock()
	defer r.mu.Unlock()
	f = f.Clean()
	r.runs = append(r.runs, recentRun{now, f})
	if f.ImagePulled != nil && f.Node != "" && f.ImageDigest != "" {
		if r.images == nil {
			r.images = map[imageKey]recentImage{}
		}
		r.images[imageKey{f.Node, f.Queue}] = recentImage{now, f.ImageDigest, *f.ImagePulled}
	}
}

// Wait notes one eval job's wait for an agent of queue, seen at now.
func (r *Recent) Wait(now time.Time, queue string, d time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, recentWait{now, queue, d})
}

// View is what serve knows now beyond the recent runs.
type View struct {
	// Known is false before the first queue view: the roster may be
	// what the store kept, not what Buildkite says now.
	Known bool
	// Queues are the queues to judge: the registry's and the view's.
	Queues []string
	// Agents are the roster's: connected, paused, lost (and why).
	Agents []roster.Agent
	// Oldest is, per queue, the oldest scheduled job's wait so far: a
	// queue whose jobs do not start has no finished waits to take a p95
	// of.
	Oldest map[string]time.Duration
}

// Facts is the facts at now from v and what Recent kept; it drops what
// fell out of Window, and agents lost and image reports older than
// ForgetLost (a node removed on purpose stops alarming).
func (r *Recent) Facts(now time.Time, v View) Facts {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.prune(now)
	f := Facts{AgentsKnown: v.Known, RunsKnown: true}
	agents := r.agents(now, v)
	f.Queues = r.queues(v)
	for _, name := range slices.Sorted(maps.Keys(agents)) {
		f.Agents = append(f.Agents, *agents[name])
	}
	f.Images, f.ImagesKnown = r.imageFacts()
	return f
}

// imageFacts is each (node, queue)'s latest image report, by node and
// queue; known once any run reported one (before that, an alarm fired
// before a restart neither fires again nor resolves).
func (r *Recent) imageFacts() ([]Image, bool) {
	var out []Image
	for k, x := range r.images {
		out = append(out, Image{Node: k.node, Queue: k.queue, Image: x.image, Pulled: x.pulled})
	}
	slices.SortFunc(out, func(a, b Image) int {
		return cmp.Or(cmp.Compare(a.Node, b.Node), cmp.Compare(a.Queue, b.Queue))
	})
	return out, r.images != nil
}

func (r *Recent) prune(now time.Time) {
	from := now.Add(-Window)
	r.runs = slices.DeleteFunc(r.runs, func(x recentRun) bool { return x.at.Before(from) })
	r.waits = slices.DeleteFunc(r.waits, func(x recentWait) bool { return x.at.Before(from) })
	maps.DeleteFunc(r.images, func(_ imageKey, x recentImage) bool { return now.Sub(x.at) > ForgetLost })
}

// agents is the roster's agents (but those lost for ForgetLost) and any
// with recent runs; the runs' node and kbgen are the newest.
func (r *Recent) agents(now time.Time, v View) map[string]*Agent {
	out := map[string]*Agent{}
	get := func(name, queue string) *Agent {
		if out[name] == nil {
			out[name] = &Agent{Name: name, Queue: queue}
		}
		return out[name]
	}
	for _, ra := range v.Agents {
		if ra.Lost && now.Sub(ra.LostAt) > ForgetLost {
			continue
		}
		a := get(ra.Name, ra.Queue)
		a.Node, a.Kbgen, a.Lost = ra.Node, ra.KbgenVersion, ra.Lost
	}
	for _, x := range r.runs {
		if x.fact.Agent == "" {
			continue
		}
		a := get(x.fact.Agent, x.fact.Queue)
		a.Node, a.Kbgen = x.fact.Node, x.fact.KbgenVersion
		a.Runs++
		if x.fact.Noise == "noisy" {
			a.Noisy++
		}
		if x.fact.Exit != nil && *x.fact.Exit == exitcode.TempFail {
			a.Faults++
		}
	}
	return out
}

// queues is each queue's online agents (neither lost nor paused), its
// recent wait p95 and its oldest scheduled job's wait.
func (r *Recent) queues(v View) []Queue {
	online := map[string]int{}
	for _, a := range v.Agents {
		if !a.Lost && !a.Paused {
			online[a.Queue]++
		}
	}
	waits := map[string][]time.Duration{}
	for _, w := range r.waits {
		waits[w.queue] = append(waits[w.queue], w.wait)
	}
	names := slices.Clone(v.Queues)
	for q := range waits {
		names = append(names, q)
	}
	for q := range v.Oldest {
		names = append(names, q)
	}
	slices.Sort(names)
	var out []Queue
	for _, q := range slices.Compact(names) {
		qq := Queue{Name: q, Online: online[q], Oldest: v.Oldest[q]}
		if ws := waits[q]; len(ws) > 0 {
			qq.WaitP95, qq.WaitKnown = p95(ws), true
		}
		out = append(out, qq)
	}
	return out
}

// p95 is the nearest-rank 95th percentile of ws.
func p95(ws []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ws))
	i := (95*len(s)+99)/100 - 1
	return s[max(i, 0)]
}
