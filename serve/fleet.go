package serve

import (
	"errors"
	"net/http"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/fleet/metrics"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
)

// The service's hooks into the fleet packages (package fleet/...): what a
// run's build shows as it goes feeds the metrics recorder. Kept in this
// one file so that serve's own files change by a line per hook.

// fleetMarks are a run's once-only observations; guarded by Run.mu.
type fleetMarks struct {
	runnable time.Time // the eval job's runnable_at, once seen
	waited   bool      // its queue wait observed
	detected bool      // its finish observed (detection latency, facts)
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
func (s *Service) initFleet() {
	s.metrics = s.cfg.Metrics
	if s.metrics == nil {
		s.metrics = metrics.New()
	}
	s.metrics.SetSource(s.fleetSnapshot)
	s.cfg.Budget.record = func(c Class, status int, scope string) {
		s.metrics.APIRequest(classNames[c], status, scope)
	}
	s.runs.onDone = func(r *Run, st client.Status) { s.metrics.RunDone(r.req.Queue, statusNames[st]) }
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
		s.metrics.QueueWait(r.req.Queue, j.StartedAt.Sub(j.RunnableAt))
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
	if !b.FinishedAt.IsZero() {
		s.metrics.Detected(s.cfg.Now().Sub(b.FinishedAt))
	}
	all, errs := runfacts.FromMetaData(b.MetaData)
	for _, f := range all {
		s.metrics.RunFacts(f)
	}
	for _, err := range errs {
		s.logf("run %s: run facts: %v", r.ID, err)
	}
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
	if qs, ok := s.queueCached(); ok {
		snap.AgentsKnown = true
		for _, q := range qs {
			for _, a := range q.Agents {
				snap.Agents = append(snap.Agents, metrics.Agent{Queue: q.Queue, State: agentState(a)})
			}
		}
	}
	st := s.cfg.Budget.Stats()
	snap.Budget = metrics.Budget{Limit: s.cfg.Budget.Effective(), Used: st.InLastMinute, OrgRemaining: st.OrgRemaining, UserRemaining: st.UserRemaining}
	return snap
}

func agentState(a client.Agent) string {
	switch {
	case a.Paused:
		return metrics.AgentPaused
	case a.Busy:
		return metrics.AgentBusy
	}
	return metrics.AgentIdle
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
