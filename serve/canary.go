package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/gpu-mode/kbgen/internal/contract"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/fleet/canary"
	"github.com/gpu-mode/kbgen/fleet/dashboard"
	"github.com/gpu-mode/kbgen/fleet/metrics"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/payload"
)

// The service's canaries (package fleet/canary): every CanaryConfig.Every
// each available agent gets one calibration job, targeted at it by its
// kbgen-agent tag at the lowest priority; its point joins the agent's
// series; a drifting agent is logged, reported to the alerts
// (CanaryStatuses), and paused when CanaryConfig.Quarantine is on. Kept
// in this file (and a line each in service.go and fleet.go).

// CanaryConfig turns the canaries on.
type CanaryConfig struct {
	// Every is each agent's interval between canaries; 0: no canaries.
	Every time.Duration
	// Payload is the canary job (base64(zlib(json))); kbgen serve
	// --canary-payload, by default the built-in calibration example in
	// benchmark mode.
	Payload string
	// Quarantine pauses a drifting agent (the roster's quarantine, for
	// CanaryQuarantine) instead of only alerting.
	Quarantine bool
	// Options tune the drift rule.
	Options canary.Options
}

// Canary pacing: one canary create at most every canaryTick, and none
// while an earlier canary still waits for its create, so canaries add at
// most one create call ahead of any submission.
const (
	canaryTick = 5 * time.Second
	// minCanaryDeadline is the least time a canary is given to run.
	minCanaryDeadline = 10 * time.Minute
	// CanaryQuarantine is how long a drifting agent is paused.
	CanaryQuarantine = 24 * time.Hour
	// maxCanaryPoints bounds one agent's series in memory (the store
	// keeps fleetstore.CanaryRetention).
	maxCanaryPoints = 2048
)

// canaries is the service's canary state.
type canaries struct {
	mu       sync.Mutex
	points   map[string][]canary.Point // by agent, oldest first
	last     map[string]time.Time      // the last canary submitted, by agent
	open     map[string]string         // agent → its canary's run id, in flight
	rerun    map[string]bool           // the last was noisy: again at the next tick
	flagged  map[string]bool           // drift reported, until the agent is ok again
	changes  map[string]changeCache    // change points, by agent
	creating string                    // the canary waiting for its create
}

func (s *Service) initCanary() {
	s.canary = &canaries{points: map[string][]canary.Point{}, last: map[string]time.Time{}, open: map[string]string{},
		rerun: map[string]bool{}, flagged: map[string]bool{}, changes: map[string]changeCache{}}
	if s.cfg.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pts, err := s.cfg.Store.CanaryPoints(ctx, s.cfg.Now().Add(-fleetstore.CanaryRetention))
	if err != nil {
		s.logf("store: canary points not restored: %v", err)
		return
	}
	for _, p := range pts {
		s.canary.add(p)
		s.canary.last[p.Agent] = p.At
	}
}

func (c *canaries) add(p canary.Point) {
	pts := append(c.points[p.Agent], p)
	if len(pts) > maxCanaryPoints {
		pts = pts[len(pts)-maxCanaryPoints:]
	}
	c.points[p.Agent] = pts
}

// canaryLoop submits the canaries that are due, one a tick.
func (s *Service) canaryLoop(ctx context.Context) {
	if s.cfg.Canary.Every <= 0 {
		return
	}
	t := time.NewTicker(canaryTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			s.canaryTick()
		}
	}
}

// canaryTick submits the next due canary, if no canary waits for its
// create.
func (s *Service) canaryTick() {
	now := s.cfg.Now()
	c := s.canary
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := s.runs.get(c.creating); r != nil && r.buildNumber() == 0 && !r.Done() {
		return
	}
	for _, t := range s.canaryDue(now) {
		// A canary that has not run within its interval (a busy queue, an
		// agent without the kbgen-agent tag) is canceled: the next one is due.
		req := RunRequest{RunID: canary.RunID(t.Agent, now), Queue: t.Queue, Payload: s.cfg.Canary.Payload,
			Priority: strconv.Itoa(contract.PriorityLowest), Agent: t.Agent, TimeoutSeconds: max(s.cfg.Canary.Every, minCanaryDeadline).Seconds()}
		if _, fresh, err := s.Submit(req); err != nil || !fresh {
			s.logf("canary for agent %s not submitted: %v (a new run: %v)", t.Agent, err, fresh)
			c.last[t.Agent] = now // not again at once: at the next interval
			continue
		}
		c.last[t.Agent], c.open[t.Agent], c.creating = now, req.RunID, req.RunID
		delete(c.rerun, t.Agent)
		return
	}
}

// canaryDue is the agents due a canary: available (not lost, paused or
// quarantined), none in flight, and past the interval or owed a re-run;
// c.mu is held.
func (s *Service) canaryDue(now time.Time) []canary.Target {
	c := s.canary
	var targets []canary.Target
	last := map[string]time.Time{}
	for _, a := range s.roster.List() {
		if a.Lost || a.Paused || a.Queue == "" || c.open[a.Name] != "" {
			continue
		}
		targets = append(targets, canary.Target{Agent: a.Name, Queue: a.Queue})
		if at, ok := c.last[a.Name]; ok && !c.rerun[a.Name] {
			last[a.Name] = at
		}
	}
	return canary.Due(targets, last, s.cfg.Canary.Every, now)
}

// buildNumber is the run's build, 0 before its create.
func (r *Run) buildNumber() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.build
}

// canaryDone takes a finished canary's point; r.mu is held (Run.finish),
// so the work is done outside.
func (s *Service) canaryDone(r *Run, st client.Status) {
	if !canary.IsCanary(r.ID) {
		return
	}
	facts := append([]runfacts.Facts(nil), r.marks.attempts...)
	kept, at := r.result, r.marks.finishedAt
	if at.IsZero() {
		at = s.cfg.Now()
	}
	go s.canaryPoint(r.ID, st, kept, facts, at)
}

func (s *Service) canaryPoint(id string, st client.Status, k *kept, facts []runfacts.Facts, at time.Time) {
	res, err := s.keptResult(k)
	if err == nil {
		var p canary.Point
		if p, err = canary.PointFrom(id, res, facts, at); err == nil {
			s.canaryJudge(id, p)
			return
		}
	}
	s.logf("canary %s (%s): no point: %v", id, statusNames[st], err)
	s.canaryClose(id, false)
}

// canaryClose ends the agent's open canary; rerun: owed another at once.
func (s *Service) canaryClose(id string, rerun bool) {
	c := s.canary
	c.mu.Lock()
	defer c.mu.Unlock()
	for agent, open := range c.open {
		if open == id {
			delete(c.open, agent)
			if rerun {
				c.rerun[agent] = true
			}
		}
	}
}

// keptResult reads a kept result back.
func (s *Service) keptResult(k *kept) (*payload.FullResult, error) {
	if k == nil {
		return nil, fmt.Errorf("no result")
	}
	rc, _, gone := s.keep.open(k)
	if rc == nil {
		return nil, fmt.Errorf("result gone: %s", gone)
	}
	defer rc.Close()
	var res payload.FullResult
	if err := json.NewDecoder(rc).Decode(&res); err != nil {
		return nil, fmt.Errorf("result: %w", err)
	}
	return &res, nil
}

// canaryJudge adds p to its agent's series, keeps it, and acts on the
// agent's assessment.
func (s *Service) canaryJudge(id string, p canary.Point) {
	s.canaryClose(id, p.Noisy)
	c := s.canary
	c.mu.Lock()
	c.add(p)
	a, err := canary.Judge(c.points[p.Agent], s.cfg.Canary.Options)
	newly := err == nil && a.State == canary.Drift && !c.flagged[p.Agent]
	c.flagged[p.Agent] = err == nil && a.State == canary.Drift
	c.mu.Unlock()
	if s.cfg.Store != nil {
		if err := s.cfg.Store.RecordCanary(context.Background(), p); err != nil {
			s.logf("store: canary %s not kept: %v", id, err)
		}
	}
	if p.Noisy {
		s.logf("canary %s on agent %s: the noise record blamed the machine's surroundings; re-run, not scored", id, p.Agent)
	}
	if newly {
		s.canaryAlert(a)
	}
}

// canaryAlert reports a newly drifting agent, and quarantines it when
// the operator asked for that.
func (s *Service) canaryAlert(a canary.Assessment) {
	last := a.Scored[len(a.Scored)-1]
	msg := fmt.Sprintf("canary drift on agent %s: %+.1f %% against its baseline (median %.4g over %d canaries, robust z %.1f), %d canaries in a row",
		a.Agent, 100*last.Change, a.Baseline.Median, a.Baseline.N, last.Z, a.Streak)
	s.logf("%s", msg)
	if !s.cfg.Canary.Quarantine {
		return
	}
	ctx, cancel := context.WithTimeout(WithClass(context.Background(), Urgent), time.Minute)
	defer cancel()
	if err := s.cfg.Client.PauseAgent(ctx, a.Agent, "kbgen serve quarantine: "+msg, CanaryQuarantine); err != nil {
		s.logf("canary: agent %s not quarantined: %v", a.Agent, err)
		return
	}
	now := s.cfg.Now()
	s.roster.Quarantined(a.Agent, "kbgen serve quarantine: "+msg, now.Add(CanaryQuarantine), now)
}

// CanaryReport is GET /v1/canaries: each agent's assessment, its offset
// against its fingerprint's agents, and the change points of its series.
type CanaryReport struct {
	Every   string          `json:"every"` // "0s": canaries are off
	Agents  []CanaryAgent   `json:"agents"`
	Offsets []canary.Offset `json:"offsets"`
}

// CanaryAgent is one agent's canaries.
type CanaryAgent struct {
	canary.Assessment
	Points []canary.Point `json:"points"`
	// ChangePoints are the run ids of the points that start a new
	// segment (canary.ChangePoints over the scored points).
	ChangePoints []string `json:"change_points"`
}

// Canaries is the report of every agent's canaries.
func (s *Service) Canaries() CanaryReport {
	series := s.canarySeries()
	rep := CanaryReport{Every: s.cfg.Canary.Every.String(), Agents: []CanaryAgent{}}
	var as []canary.Assessment
	for _, pts := range series {
		a, err := canary.Judge(pts, s.cfg.Canary.Options)
		if err != nil {
			continue
		}
		as = append(as, a)
		rep.Agents = append(rep.Agents, CanaryAgent{Assessment: a, Points: pts, ChangePoints: s.changePoints(a.Agent, pts)})
	}
	rep.Offsets = canary.Offsets(as, s.cfg.Canary.Options)
	return rep
}

// canarySeries is a copy of every agent's points.
func (s *Service) canarySeries() map[string][]canary.Point {
	c := s.canary
	c.mu.Lock()
	defer c.mu.Unlock()
	series := make(map[string][]canary.Point, len(c.points))
	for agent, pts := range c.points {
		series[agent] = append([]canary.Point(nil), pts...)
	}
	return series
}

// maxChangeWindow bounds the points E-divisive looks at (60 days at a
// canary every 6 hours): its cost grows with the square of the points.
const maxChangeWindow = 240

// changeCache is an agent's change points for the series it had.
type changeCache struct {
	last string // the run id of the series' last point
	ids  []string
}

// changePoints are the run ids where agent's quiet series changes,
// computed once per new point.
func (s *Service) changePoints(agent string, pts []canary.Point) []string {
	c := s.canary
	last := pts[len(pts)-1].RunID
	c.mu.Lock()
	hit, ok := c.changes[agent]
	c.mu.Unlock()
	if ok && hit.last == last {
		return hit.ids
	}
	ids := changePointsOf(pts)
	c.mu.Lock()
	c.changes[agent] = changeCache{last: last, ids: ids}
	c.mu.Unlock()
	return ids
}

// changePointsOf is the run ids where the last maxChangeWindow quiet
// points change.
func changePointsOf(pts []canary.Point) []string {
	var quiet []canary.Point
	for _, p := range pts {
		if !p.Noisy {
			quiet = append(quiet, p)
		}
	}
	quiet = quiet[max(len(quiet)-maxChangeWindow, 0):]
	xs := make([]float64, len(quiet))
	for i, p := range quiet {
		xs[i] = p.Score
	}
	out := []string{}
	for _, i := range canary.ChangePoints(xs, canary.ChangeOptions{Seed: 1}) {
		out = append(out, quiet[i].RunID)
	}
	return out
}

func (s *Service) serveCanaries(w http.ResponseWriter, _ *http.Request) {
	rep := s.Canaries()
	for i := range rep.Agents {
		// The series can be long: the dashboard draws it; the assessment's
		// scored points repeat it.
		rep.Agents[i].Scored = nil
	}
	writeJSON(w, http.StatusOK, rep)
}

// CanaryStatus is one agent's canary state for the alerts: Drift is its
// last canary's change against its baseline while it drifts (0
// otherwise), Offset its distance from its fingerprint's median agent.
type CanaryStatus struct {
	Queue, Agent  string
	State         canary.State
	Drift, Offset float64
	// Off is the canary rule's offset verdict (canary.Offset.Off).
	Off bool
}

// CanaryStatuses is every agent's canary state; known is false while
// canaries are off.
func (s *Service) CanaryStatuses() (out []CanaryStatus, known bool) {
	if s.cfg.Canary.Every <= 0 {
		return nil, false
	}
	var as []canary.Assessment
	for _, pts := range s.canarySeries() {
		if a, err := canary.Judge(pts, s.cfg.Canary.Options); err == nil {
			as = append(as, a)
		}
	}
	offsets := map[string]canary.Offset{}
	for _, o := range canary.Offsets(as, s.cfg.Canary.Options) {
		offsets[o.Agent] = o
	}
	queues := map[string]string{}
	for _, a := range s.roster.List() {
		queues[a.Name] = a.Queue
	}
	for _, a := range as {
		st := CanaryStatus{Queue: queues[a.Agent], Agent: a.Agent, State: a.State, Offset: offsets[a.Agent].Change, Off: offsets[a.Agent].Off}
		if a.State == canary.Drift {
			st.Drift = a.Scored[len(a.Scored)-1].Change
		}
		out = append(out, st)
	}
	return out, true
}

// canaryMetrics is the judged agents' verdicts for /metrics
// (fleet/metrics: kbgen_canary_drifting, kbgen_canary_offset_ratio).
func (s *Service) canaryMetrics() []metrics.Canary {
	sts, _ := s.CanaryStatuses()
	var out []metrics.Canary
	for _, st := range sts {
		if st.State != canary.Baselining {
			out = append(out, metrics.Canary{Agent: st.Agent, Queue: st.Queue, Drifting: st.State == canary.Drift, Off: st.Off, Offset: st.Offset})
		}
	}
	return out
}

// sparkPoints is how many of an agent's latest quiet canaries the
// dashboard draws (15 days at one every 6 hours).
const sparkPoints = 60

// dashboardCanaries is each agent's canary sparkline: its latest quiet
// scores, its baseline and the change points among them; none while
// canaries are off.
func (s *Service) dashboardCanaries() map[string]*dashboard.Canary {
	if s.cfg.Canary.Every <= 0 {
		return nil
	}
	out := map[string]*dashboard.Canary{}
	rep := s.Canaries()
	offsets := map[string]canary.Offset{}
	for _, o := range rep.Offsets {
		offsets[o.Agent] = o
	}
	for _, a := range rep.Agents {
		c := &dashboard.Canary{State: string(a.State), Off: offsets[a.Agent].Off, Offset: offsets[a.Agent].Change}
		if a.State != canary.Baselining {
			c.Baseline = a.Baseline.Median
		}
		var quiet []canary.Point
		for _, p := range a.Points {
			if !p.Noisy {
				quiet = append(quiet, p)
			}
		}
		quiet = quiet[max(len(quiet)-sparkPoints, 0):]
		at := map[string]int{}
		for i, p := range quiet {
			c.Scores = append(c.Scores, p.Score)
			at[p.RunID] = i
		}
		for _, id := range a.ChangePoints {
			if i, ok := at[id]; ok {
				c.Changes = append(c.Changes, i)
			}
		}
		out[a.Agent] = c
	}
	return out
}
