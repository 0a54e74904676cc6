package serve

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// Run is one run the service owns: its request, its build once created,
// the progress events so far (kept, so a client that reconnects replays
// them), and its outcome once done.
type Run struct {
	ID  string
	req RunRequest // zero Payload for a run recovered from Buildkite

	mu          sync.Mutex
	start       time.Time // for elapsed times: submission, or the build's creation
	deadline    time.Time // zero: none
	build       int
	url         string
	buildState  string
	jobState    string        // the eval job's, when a list answer carried jobs
	created     time.Time     // the build's created_at, Buildkite's clock
	canceled    string        // why the run is being canceled, once asked
	cancelRetry bool          // the cancel request failed: the watcher asks again
	budgetSaid  bool          // "waiting for API budget" told since the last event
	fetching    bool          // a result fetch is under way
	final       *client.Build // the finished build as the watcher saw it, for the fetch
	done        bool
	doneAt      time.Time
	status      client.Status
	result      *kept // in the service's keeper
	events      []client.Event
	changed     chan struct{} // closed on every new event
	streams     int           // event streams open now
	creator     string        // the instance that created its build, when adopted (twin.go)
	seen        time.Time     // a client's last sign: its POST, a GET, a stream open or closed
	marks       fleetMarks    // fleet.go
	onDone      func(*Run, client.Status)
}

func newRun(req RunRequest, now time.Time) *Run {
	r := &Run{ID: req.RunID, req: req, start: now, seen: now, changed: make(chan struct{})}
	if t := req.timeout(); t > 0 {
		r.deadline = now.Add(t)
	}
	return r
}

// emitLocked appends an event with its elapsed time and wakes listeners.
func (r *Run) emitLocked(e client.Event, now time.Time) {
	e.Build = r.build
	e.RunID = r.ID
	e.Elapsed = now.Sub(r.start)
	e.Seconds = e.Elapsed.Round(100 * time.Millisecond).Seconds()
	r.events = append(r.events, e)
	if e.Kind != "budget" {
		r.budgetSaid = false
	}
	close(r.changed)
	r.changed = make(chan struct{})
}

// created records the build.
func (r *Run) setBuild(b *client.Build, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.build != 0 {
		return
	}
	r.build, r.url, r.created = b.Number, b.WebURL, b.CreatedAt
	r.emitLocked(client.Event{Kind: "created", URL: b.WebURL}, now)
	r.observeLocked(b, now)
}

// observeLocked reports a state change of the build.
func (r *Run) observeLocked(b *client.Build, now time.Time) {
	if b.State != "" && b.State != r.buildState {
		r.buildState = b.State
		r.emitLocked(client.Event{Kind: "state", State: b.State}, now)
	}
	if j := b.EvalJob(); j != nil && j.State != r.jobState {
		r.jobState = j.State
		r.emitLocked(client.Event{Kind: "job", Step: contract.EvalStepKey, State: j.State}, now)
	}
}

// observe takes in the build as the watcher saw it. A done run's build
// may still be canceling: its build_state follows, without events (the
// done event was the last).
func (r *Run) observe(b *client.Build, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.done:
		r.observeLocked(b, now)
	case b.State != "" && !client.FinishedState(r.buildState):
		r.buildState = b.State // never back from a final state (a list that lags)
	}
}

// watched reports whether the watcher still polls for the run: until it
// is done and its build is final (a canceled run's build goes through
// canceling first).
func (r *Run) watched() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.done || (r.buildState != "" && !client.FinishedState(r.buildState))
}

// finish records the outcome once, res in k; later calls change nothing.
func (r *Run) finish(st client.Status, res *payload.FullResult, k *keeper, now time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return false
	}
	r.done, r.doneAt, r.status, r.result = true, now, st, k.keep(res)
	if r.onDone != nil {
		r.onDone(r, st)
	}
	code := st.ExitCode()
	// The event is kept and replayed, and a client reads it as one line:
	// the error (the submission's to size) is cut.
	// A copy of Success: a pointer into res would keep the whole result
	// alive with the event.
	success := res.Success
	r.emitLocked(client.Event{Kind: "done", State: r.buildState, Success: &success, Exit: &code, Error: cut(res.Error, maxEventError)}, now)
	return true
}

// maxEventError bounds the error text of a done event; the result has it
// whole.
const maxEventError = 4 << 10

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + " [… cut; the result has the whole text]"
}

// Status is the run's API view.
func (r *Run) Status(now time.Time) RunStatus {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := RunStatus{RunID: r.ID, State: StateQueued, Build: r.build, URL: r.url, BuildState: r.buildState,
		Elapsed: now.Sub(r.start).Round(100 * time.Millisecond).Seconds()}
	if r.build != 0 {
		st.State = StateBuilding
	}
	if r.done {
		st.State, st.Status = StateDone, statusNames[r.status]
	}
	return st
}

// kept is the run's result handle, nil until done.
func (r *Run) kept() *kept {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.result
}

// Events returns the events from index from on, whether the run is done,
// and a channel closed at the next event.
func (r *Run) Events(from int) ([]client.Event, bool, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []client.Event
	if from < len(r.events) {
		out = append(out, r.events[max(from, 0):]...)
	}
	return out, r.done, r.changed
}

// last is the run's last event, alone (none before the first).
func (r *Run) last() []client.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.events) == 0 {
		return nil
	}
	return []client.Event{r.events[len(r.events)-1]}
}

// Done reports whether the run has its outcome.
func (r *Run) Done() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.done
}

func (r *Run) snapshot() (build int, state string, created, deadline time.Time, canceled string, done bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.build, r.buildState, r.created, r.deadline, r.canceled, r.done
}
