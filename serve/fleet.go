package serve

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/fleet/metrics"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/internal/contract"
)

// The service's hooks into the fleet packages (package fleet/...): what a
// run's build shows as it goes feeds the metrics recorder. Kept in this
// one file so that serve's own files change by a line per hook.

// fleetMarks are a run's once-only observations; guarded by Run.mu.
type fleetMarks struct {
	runnable time.Time // the eval job's runnable_at, once seen
	waited   bool      // its queue wait observed
	detected bool      // its finish observed (detection latency, facts)
	// For the store: what the finish showed.
	wait, detection time.Duration
	finishedAt      time.Time
	attempts        []runfacts.Facts
	build           int
}

// ErrViewTokenReused is a view token equal to the server token: its
// holders could submit and cancel.
var ErrViewTokenReused = errors.New("KBGEN_VIEW_TOKEN must differ from KBGEN_SERVER_TOKEN: the view token is read-only")

// Metrics is the service's recorder (Config.Metrics, or its own).
func (s *Service) Metrics() *metrics.Recorder { return s.metrics }

// CheckTokens refuses a view token equal to the server token.
func CheckTokens(server, view string) error {
	if view != "" && view == server {
		return ErrViewTokenReused
	}
	return nil
}

// initFleet makes the recorder and hooks it to
// the budget, the runs and the scrape-time snapshot.
func (s *Service) initFleet() error {
	s.metrics = s.cfg.Metrics
	if s.metrics == nil {
		s.metrics = metrics.New()
	}
	s.metrics.SetSource(s.fleetSnapshot)
	s.initRoster()
	s.cfg.Budget.record = func(c Class, status int, scope string) {
		s.metrics.APIRequest(classNames[c], status, scope)
	}
	s.runs.onDone = func(r *Run, st client.Status) {
		s.metrics.RunDone(r.req.Queue, statusNames[st])
		s.keepRun(r, st)
		s.canaryDone(r, st)
		s.verifyDone(r)
	}
	if s.cfg.Store != nil {
		s.storeq = make(chan fleetstore.Run, storeQueue)
	}
	return s.initAlerts()
}

// storeQueue bounds the runs waiting for the store: a database slower
// than the runs drops history (logged), never holds a run's outcome.
const storeQueue = 4096

// keepRun queues the finished run for the store; r.mu is held (Run.finish).
func (s *Service) keepRun(r *Run, st client.Status) {
	if s.storeq == nil {
		return
	}
	m := r.marks
	rec := fleetstore.Run{ID: r.ID, Queue: r.req.Queue, Outcome: statusNames[st], Build: max(r.build, m.build), FinishedAt: m.finishedAt,
		Wait: m.wait, Detection: m.detection}
	if rec.FinishedAt.IsZero() {
		rec.FinishedAt = s.cfg.Now()
	}
	for _, f := range m.attempts {
		rec.Attempts = append(rec.Attempts, fleetstore.Attempt{Attempt: f.Attempt, Agent: f.Agent, Queue: f.Queue, Node: f.Node, Exit: f.Exit,
			Noise: f.Noise, Xids: f.Xids, ClockEventSeconds: f.ClockEventSeconds})
	}
	select {
	case s.storeq <- rec:
	default:
		go s.logf("store: %d runs waiting; run %s is not kept in the history", storeQueue, r.ID)
	}
}

// storeWriter writes finished runs to the store, and prunes it to its
// retention every storePrune.
func (s *Service) storeWriter(ctx context.Context) {
	if s.storeq == nil {
		return
	}
	t := time.NewTicker(storePrune)
	defer t.Stop()
	s.pruneStore(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case rec := <-s.storeq:
			if err := s.cfg.Store.RecordRun(ctx, rec); err != nil {
				s.logf("store: run %s not kept: %v", rec.ID, err)
			}
		case a := <-s.agentq:
			if err := s.cfg.Store.PutAgent(ctx, a); err != nil {
				s.logf("store: agent %s not kept: %v", a.Name, err)
			}
		case <-t.C:
			s.pruneStore(ctx)
		}
	}
}

const storePrune = time.Hour

func (s *Service) pruneStore(ctx context.Context) {
	if n, err := s.cfg.Store.Prune(ctx, s.cfg.Now()); err != nil {
		s.logf("store: pruning: %v", err)
	} else if n > 0 {
		s.logf("store: dropped %d runs past the retention", n)
	}
}

var classNames = map[Class]string{Urgent: "urgent", Poll: "poll", Create: "create"}

// viewAuth admits the server token or the view token (read-only routes).
func (s *Service) viewAuth(token string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		hdr := r.Header.Get("Authorization")
		open := token == "" && s.cfg.ViewToken == ""
		if !open && !(token != "" && bearerOK(hdr, token)) && !(s.cfg.ViewToken != "" && bearerOK(hdr, s.cfg.ViewToken)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="kbgen"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (KBGEN_VIEW_TOKEN or KBGEN_SERVER_TOKEN)")
			return
		}
		h(w, r)
	}
}

// countWebhook counts each webhook by the status it was answered.
func (s *Service) countWebhook(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		sw := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		h(sw, r)
		s.metrics.Webhook(sw.status)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	w.status = code
	w.ResponseWriter.WriteHeader(code)
}

// noteSeen takes what a listing shows of a run's eval job: when it became
// runnable, and once it started, its wait for an agent.
func (s *Service) noteSeen(r *Run, b *client.Build) {
	j := b.EvalJob()
	if j == nil {
		return
	}
	r.mu.Lock()
	if !j.RunnableAt.IsZero() {
		r.marks.runnable = j.RunnableAt
	}
	observe := !r.marks.waited && j.Started() && !j.RunnableAt.IsZero()
	r.marks.waited = r.marks.waited || observe
	r.mu.Unlock()
	if observe {
		r.mu.Lock()
		r.marks.wait = j.StartedAt.Sub(j.RunnableAt)
		r.mu.Unlock()
		s.metrics.QueueWait(r.req.Queue, j.StartedAt.Sub(j.RunnableAt))
		s.waits.add(r.req.Queue, j.StartedAt.Sub(j.RunnableAt))
		s.alertWait(r.req.Queue, j.StartedAt.Sub(j.RunnableAt))
	}
}

// noteFinished observes, once per run, how long after Buildkite's
// finished_at the service saw the build finished, and feeds each eval
// attempt's run facts (meta-data runfacts.Key(attempt)) to the per-agent
// series.
func (s *Service) noteFinished(r *Run, b *client.Build) {
	r.mu.Lock()
	first := !r.marks.detected && !r.done
	r.marks.detected = true
	r.mu.Unlock()
	if !first {
		return
	}
	var detection time.Duration
	// A run recovered at start (no payload: found on Buildkite) finished
	// while no service watched: its delay is the restart's, not
	// detection's.
	if !b.FinishedAt.IsZero() && r.req.Payload != "" {
		detection = s.cfg.Now().Sub(b.FinishedAt)
		s.metrics.Detected(detection)
	}
	at := b.FinishedAt
	if at.IsZero() {
		at = s.cfg.Now()
	}
	all, errs := runfacts.FromMetaData(b.MetaData, vouchFacts(b, r.req.Queue))
	r.mu.Lock()
	r.marks.detection, r.marks.finishedAt, r.marks.attempts, r.marks.build = detection, b.FinishedAt, all, b.Number
	r.mu.Unlock()
	for _, f := range all {
		s.metrics.RunFacts(f)
		s.roster.Facts(f, at)
		s.tally.add(f)
		s.alertRun(f)
	}
	for _, err := range errs {
		s.logf("run %s: run facts: %v", r.ID, err)
	}
}

// vouchFacts takes an attempt's facts only as what Buildkite says of
// build b: stamped by one of its eval jobs (each job one attempt), naming
// the agent Buildkite says ran that job, in the run's queue. Meta-data is
// any job's of the build to set, and an agent host is trusted for its own
// hardware only (docs/security.md): facts naming another agent or queue
// would move that agent's series, roster entry, alarms and canary points.
// The watcher lists finished builds with their retried jobs, so an
// attempt that exited 75 is vouched for too.
func vouchFacts(b *client.Build, queue string) runfacts.Vouch {
	used := map[string]bool{}
	return func(job string, f runfacts.Facts) error {
		j := evalJobByID(b, job)
		switch {
		case j == nil:
			return fmt.Errorf("stamped by job %q, which is no eval job of build %d", job, b.Number)
		case used[job]:
			return fmt.Errorf("job %s stamped an earlier attempt's facts already", job)
		case f.Agent != (runfacts.Facts{Agent: j.Agent}).Clean().Agent:
			return fmt.Errorf("they name agent %q, but Buildkite says job %s ran on %q", f.Agent, job, j.Agent)
		case f.Queue != queue:
			return fmt.Errorf("they name queue %q, but the run is on %q", f.Queue, queue)
		}
		used[job] = true
		return nil
	}
}

// evalJobByID is build b's eval job of that id, retried or not; nil if b
// lists none.
func evalJobByID(b *client.Build, id string) *client.Job {
	for i := range b.Jobs {
		if j := &b.Jobs[i]; j.ID == id && j.StepKey == contract.EvalStepKey && j.Type == "script" {
			return j
		}
	}
	return nil
}

// fleetSnapshot is what the scrape-time gauges read: the runs not done,
// the cached queue view's agents (a refresh started when stale, never
// waited for), and the budget.
func (s *Service) fleetSnapshot() metrics.Snapshot {
	var snap metrics.Snapshot
	for _, r := range s.pending.list() {
		snap.Jobs = append(snap.Jobs, metrics.Job{Queue: r.req.Queue, State: metrics.JobQueued})
	}
	for _, r := range s.runs.active() {
		r.mu.Lock()
		j := metrics.Job{Queue: r.req.Queue, State: metrics.JobState(r.jobState), Runnable: r.marks.runnable}
		r.mu.Unlock()
		snap.Jobs = append(snap.Jobs, j)
	}
	if _, ok := s.queueCached(); ok {
		snap.AgentsKnown = true
	}
	for _, a := range s.roster.List() {
		snap.AgentsKnown = true
		snap.Agents = append(snap.Agents, metrics.Agent{Queue: a.Queue, State: a.State()})
	}
	st := s.cfg.Budget.Stats()
	snap.Budget = metrics.Budget{Limit: s.cfg.Budget.Effective(), Used: st.InLastMinute, OrgRemaining: st.OrgRemaining, UserRemaining: st.UserRemaining}
	snap.Canaries = s.canaryMetrics()
	return snap
}

// queueCached is the cached queue view without waiting: a stale one
// starts a refresh within the budget's poll share, as GET /v1/queues does.
func (s *Service) queueCached() ([]client.QueueStatus, bool) {
	v := &s.queues
	v.mu.Lock()
	defer v.mu.Unlock()
	stale := v.at.IsZero() || s.cfg.Now().Sub(v.at) >= s.cfg.QueueTTL
	if stale && !v.refreshing && s.ctx != nil && s.cfg.Budget.Ready(Poll) == 0 {
		v.refreshing = true
		v.refreshed = make(chan struct{})
		go s.refreshQueues()
	}
	return v.qs, !v.at.IsZero()
}
