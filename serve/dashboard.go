package serve

import (
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/fleet/dashboard"
	"github.com/gpu-mode/kbgen/fleet/metrics"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// The dashboard's side of the service (package fleet/dashboard renders;
// this file gathers what it shows, for one scope).

// mountDashboard serves /dashboard to the server token, the view token
// (every queue) and the vendors' tokens (their queues).
func (s *Service) mountDashboard(mux *http.ServeMux, token string) {
	h := dashboard.Handler(dashboard.NewAccess([]string{token, s.cfg.ViewToken}, s.cfg.VendorTokens, s.cfg.Now), s.dashboardPage)
	for _, p := range []string{"GET /dashboard", "POST /dashboard/login", "POST /dashboard/logout"} {
		mux.Handle(p, h)
	}
}

// recentWaits is each queue's last waits for an agent, for the
// dashboard's p50 and p95 (the histogram has them for Prometheus).
type recentWaits struct {
	mu sync.Mutex
	by map[string][]time.Duration
}

const keptWaits = 200

func (w *recentWaits) add(queue string, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.by == nil {
		w.by = map[string][]time.Duration{}
	}
	if _, ok := w.by[queue]; !ok && len(w.by) >= metrics.MaxQueues {
		return
	}
	ws := append(w.by[queue], d)
	if len(ws) > keptWaits {
		ws = ws[len(ws)-keptWaits:]
	}
	w.by[queue] = ws
}

func (w *recentWaits) of(queue string) []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.by[queue])
}

// agentTally is each agent's attempts, noisy ones and faults seen since
// the service started.
type agentTally struct {
	mu sync.Mutex
	by map[string]*tally
}

type tally struct{ runs, noisy, faults int }

func (a *agentTally) add(f runfacts.Facts) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.by == nil {
		a.by = map[string]*tally{}
	}
	t := a.by[f.Agent]
	if t == nil {
		if len(a.by) >= metrics.MaxAgents {
			return
		}
		t = &tally{}
		a.by[f.Agent] = t
	}
	t.runs++
	if f.Noise == "noisy" {
		t.noisy++
	}
	if f.Exit != nil && *f.Exit == exitcode.TempFail {
		t.faults++
	}
}

func (a *agentTally) get(agent string) tally {
	a.mu.Lock()
	defer a.mu.Unlock()
	if t := a.by[agent]; t != nil {
		return *t
	}
	return tally{}
}

// dashboardPage is the page for scope: only its queues, their agents and
// runs; the API budget for the whole-fleet scope only.
func (s *Service) dashboardPage(scope dashboard.Scope) dashboard.Page {
	now := s.cfg.Now()
	p := dashboard.Page{Scope: scope, AsOf: now}
	if s.alerts == nil {
		p.AlertsOff = "alerting is not set up in this kbgen serve (--alerts)"
	} else {
		p.Alerts = s.openAlerts(scope)
	}
	byQueue := map[string]*dashboard.Queue{}
	queue := func(name string) *dashboard.Queue {
		if byQueue[name] == nil {
			byQueue[name] = &dashboard.Queue{Name: name}
		}
		return byQueue[name]
	}
	snap := s.fleetSnapshot()
	for _, j := range snap.Jobs {
		if !scope.Sees(j.Queue) {
			continue
		}
		q := queue(j.Queue)
		switch j.State {
		case metrics.JobQueued:
			q.Queued++
		case metrics.JobWaiting:
			q.Waiting++
		case metrics.JobScheduled:
			q.Scheduled++
			if !j.Runnable.IsZero() {
				q.OldestScheduled = max(q.OldestScheduled, now.Sub(j.Runnable))
			}
		case metrics.JobRunning:
			q.Running++
		}
	}
	p.Nodes = s.dashboardAgents(scope, queue)
	for name, q := range byQueue {
		ws := s.waits.of(name)
		q.Waits, q.WaitP50, q.WaitP95 = len(ws), dashboard.Percentile(ws, 50), dashboard.Percentile(ws, 95)
		p.Queues = append(p.Queues, *q)
	}
	slices.SortFunc(p.Queues, func(a, b dashboard.Queue) int { return cmpString(a.Name, b.Name) })
	p.InFlight = s.dashboardRuns(scope, now)
	if scope.All() {
		b := snap.Budget
		p.Budget = &dashboard.Budget{Limit: b.Limit, Used: b.Used, OrgRemaining: b.OrgRemaining, UserRemaining: b.UserRemaining}
	}
	return p
}

// dashboardAgents is the scope's agents by node, counting each into its
// queue's line.
func (s *Service) dashboardAgents(scope dashboard.Scope, queue func(string) *dashboard.Queue) []dashboard.Node {
	byNode := map[string]*dashboard.Node{}
	var order []string
	canaries := s.dashboardCanaries()
	for _, a := range s.roster.List() {
		if !scope.Sees(a.Queue) {
			continue
		}
		q := queue(a.Queue)
		q.Agents++
		switch a.State() {
		case "idle":
			q.Idle++
		case "busy":
			q.Busy++
		case "paused":
			q.Paused++
		case "lost":
			q.Lost++
		}
		node := a.Node
		if node == "" {
			node = "node not known yet (no run facts)"
		}
		if byNode[node] == nil {
			byNode[node] = &dashboard.Node{Name: node}
			order = append(order, node)
		}
		t := s.tally.get(a.Name)
		da := dashboard.Agent{Name: a.Name, Queue: a.Queue, GPU: a.GPUModel, State: a.State(), LastJob: a.LastJob, Runs: t.runs, Canary: canaries[a.Name]}
		if t.runs > 0 {
			da.NoisyRate, da.FaultRate = float64(t.noisy)/float64(t.runs), float64(t.faults)/float64(t.runs)
		}
		switch {
		case a.Lost:
			da.Note = a.LostWhy
		case a.Quarantined:
			da.Note = a.PauseNote + " (until " + a.PausedUntil.UTC().Format(time.RFC3339) + ")"
		}
		byNode[node].Agents = append(byNode[node].Agents, da)
	}
	slices.Sort(order)
	out := make([]dashboard.Node, 0, len(order))
	for _, n := range order {
		out = append(out, *byNode[n])
	}
	return out
}

// dashboardRuns is the scope's runs not done, oldest first.
func (s *Service) dashboardRuns(scope dashboard.Scope, now time.Time) []dashboard.Run {
	var out []dashboard.Run
	add := func(r *Run, state string) {
		if !scope.Sees(r.req.Queue) {
			return
		}
		r.mu.Lock()
		dr := dashboard.Run{ID: r.ID, Queue: r.req.Queue, State: state, Build: r.build, URL: r.url, Age: now.Sub(r.start)}
		if state == "" {
			dr.State = metrics.JobState(r.jobState)
		}
		r.mu.Unlock()
		out = append(out, dr)
	}
	for _, r := range s.pending.list() {
		add(r, metrics.JobQueued)
	}
	for _, r := range s.runs.active() {
		add(r, "")
	}
	slices.SortFunc(out, func(a, b dashboard.Run) int { return int(b.Age - a.Age) })
	return out
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
