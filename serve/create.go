package serve

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/payload"
)

// Submit accepts a run: a new id is queued for its create, a known id
// returns the existing run (fresh false). A known id with a different
// payload is an error: a run id names one job.
func (s *Service) Submit(req RunRequest) (*Run, bool, error) {
	cfg, err := req.validate()
	if err != nil {
		return nil, false, &RequestError{Msg: err.Error()}
	}
	if s.cfg.Registry != nil {
		v, err := s.cfg.Registry.Lookup(req.Queue)
		if err != nil {
			return nil, false, &RequestError{Msg: err.Error()}
		}
		req.Queue = v.Queue
	}
	if req.BootstrapQueue == "" {
		req.BootstrapQueue = s.cfg.BootstrapQueue
	}
	r, fresh := s.runs.add(req, s.cfg.Now())
	if !fresh {
		r.touch(s.cfg.Now())
		if r.req.Payload != "" && r.req.Payload != req.Payload {
			return nil, false, &RequestError{Conflict: true, Msg: fmt.Sprintf("run %s already exists with a different payload", req.RunID)}
		}
		return r, false, nil
	}
	r.req.Payload = req.Payload
	_ = cfg
	s.pending.push(r)
	return r, true, nil
}

// RequestError is a request the service refuses.
type RequestError struct {
	Conflict bool
	Msg      string
}

func (e *RequestError) Error() string { return e.Msg }

// creator creates builds one at a time in submission order. Each create
// waits for the budget's create share, so a burst of submissions queues
// here (its runs told "waiting for API budget") instead of pushing the org
// into 429s.
func (s *Service) creator(ctx context.Context) {
	select {
	case <-ctx.Done():
		return
	case <-s.ready:
	}
	for {
		r := s.pending.pop()
		if r == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.pending.ready:
			}
			continue
		}
		s.create(ctx, r)
	}
}

func (s *Service) create(ctx context.Context, r *Run) {
	if build, _, _, _, why, done := r.snapshot(); done || why != "" || build != 0 {
		return // ended, canceled, or its build found by the startup scan
	}
	if d := s.cfg.Budget.Ready(Create); d > 0 {
		s.sayBudget(r)
		for _, q := range s.pending.list() {
			s.sayBudget(q)
		}
	}
	sub := s.submission(r)
	nb := sub.NewBuild()
	nb.MetaData[MetaDataService] = s.cfg.Name
	nb.MetaData[MetaDataInstance] = s.instance
	if r.req.Detach {
		nb.MetaData[MetaDataDetach] = "true"
	}
	if _, _, _, dl, _, _ := r.snapshot(); !dl.IsZero() {
		nb.MetaData[MetaDataDeadline] = dl.UTC().Format(time.RFC3339)
	}
	b, err := s.cfg.Client.CreateBuild(WithClass(ctx, Create), nb)
	now := s.cfg.Now()
	if err != nil {
		if ctx.Err() != nil {
			return
		}
		s.logf("run %s: %v", r.ID, err)
		r.finish(client.Infra, payload.Failed(payload.SystemInfo{}, fmt.Errorf("run %s on %s: %v", r.ID, sub.Queue, err)), s.keep, now)
		return
	}
	r.setBuild(b, now)
	s.runs.linkBuild(r, b.Number)
	s.logf("run %s: build %d created", r.ID, b.Number)
	if _, _, _, _, why, _ := r.snapshot(); why != "" {
		go s.cancelBuild(r, why) // canceled while the create was in flight
	}
	s.wake()
}

// sayBudget tells a run once that it waits for the API budget.
func (s *Service) sayBudget(r *Run) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.budgetSaid || r.done {
		return
	}
	r.budgetSaid = true
	r.emitLocked(client.Event{Kind: "budget", State: "waiting for API budget"}, s.cfg.Now())
}

// createQueue is the runs waiting for their create, in order.
type createQueue struct {
	mu    sync.Mutex
	items []*Run
	ready chan struct{} // has a token when items may be non-empty
}

func newCreateQueue() *createQueue { return &createQueue{ready: make(chan struct{}, 1)} }

func (q *createQueue) push(r *Run) {
	q.mu.Lock()
	q.items = append(q.items, r)
	q.mu.Unlock()
	select {
	case q.ready <- struct{}{}:
	default:
	}
}

func (q *createQueue) pop() *Run {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	r := q.items[0]
	q.items[0] = nil
	q.items = q.items[1:]
	return r
}

func (q *createQueue) list() []*Run {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]*Run(nil), q.items...)
}

func (s *Service) submission(r *Run) client.Submission {
	q := r.req
	sub := client.Submission{Queue: q.Queue, RunID: q.RunID, Encoded: q.Payload, Image: q.Image, Priority: q.Priority,
		User: q.User, BootstrapQueue: q.BootstrapQueue, Branch: q.Branch, Commit: q.Commit, Agent: q.Agent}
	if cfg, err := payload.Decode(q.Payload); err == nil {
		sub.Mode = cfg.Mode
	}
	if sub.Branch == "" {
		sub.Branch = "main"
	}
	if sub.Commit == "" {
		sub.Commit = "HEAD"
	}
	return sub
}
