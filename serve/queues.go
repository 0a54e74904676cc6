package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/client"
)

// DefaultQueueTTL is how old the queue view may be before a request for it
// starts a refresh. Kernelbot asks for every submission; the cost stays one
// refresh (the agents list and the unfinished builds, a few requests) per
// TTL at most, whatever the number of callers.
const DefaultQueueTTL = 15 * time.Second

// queueWait bounds how long the very first request waits for the first
// view; later ones get the cached view at once.
const queueWait = 10 * time.Second

// QueueStatus is the answer of GET /v1/queues/{queue} (and each element of
// GET /v1/queues): client.QueueStatus (agents total, idle and busy; waiting
// builds), the jobs running on the queue's agents, and the view's time.
type QueueStatus struct {
	client.QueueStatus
	Running int       `json:"running"` // jobs on the queue's agents: one per busy agent
	AsOf    time.Time `json:"as_of"`   // when Buildkite was asked
}

// queueView is the one cached view of every queue, refreshed in the
// background, within the budget's poll share.
type queueView struct {
	mu         sync.Mutex
	at         time.Time // of the last good refresh; zero: none yet
	qs         []client.QueueStatus
	err        error // of the last refresh
	refreshing bool
	refreshed  chan struct{} // closed when a refresh ends
	refreshes  int
}

// ErrNoQueueView is the answer while no refresh has succeeded yet.
var ErrNoQueueView = errors.New("no queue view yet")

// Queues reports one queue (a name or alias; "" for all) from the cached
// view, refreshing it first when it is older than the TTL and the budget
// lets a poll go now. Only the first call ever waits for Buildkite.
func (s *Service) Queues(ctx context.Context, queue string) ([]QueueStatus, error) {
	if queue != "" && s.cfg.Registry != nil {
		v, err := s.cfg.Registry.Lookup(queue)
		if err != nil {
			return nil, &RequestError{Msg: err.Error()}
		}
		queue = v.Queue
	}
	qs, at, err := s.queueSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	var out []QueueStatus
	for _, q := range qs {
		if queue == "" || q.Queue == queue {
			out = append(out, QueueStatus{QueueStatus: q, Running: q.Busy, AsOf: at})
		}
	}
	s.withoutUnavailable(out)
	if queue != "" && len(out) == 0 {
		// A registry queue with no agent and nothing waiting.
		out = append(out, QueueStatus{QueueStatus: client.QueueStatus{Queue: queue, Agents: []client.Agent{}}, AsOf: at})
	}
	return out, nil
}

// QueueRefreshes is how many times the view was read from Buildkite.
func (s *Service) QueueRefreshes() int {
	v := &s.queues
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.refreshes
}

func (s *Service) queueSnapshot(ctx context.Context) ([]client.QueueStatus, time.Time, error) {
	v := &s.queues
	v.mu.Lock()
	stale := v.at.IsZero() || s.cfg.Now().Sub(v.at) >= s.cfg.QueueTTL
	if stale && !v.refreshing && (v.at.IsZero() || s.cfg.Budget.Ready(Poll) == 0) {
		v.refreshing = true
		v.refreshed = make(chan struct{})
		go s.refreshQueues()
	}
	wait := v.refreshed
	first := v.at.IsZero() && v.refreshing
	v.mu.Unlock()
	if first {
		t := time.NewTimer(queueWait)
		defer t.Stop()
		select {
		case <-wait:
		case <-t.C:
		case <-ctx.Done():
		}
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.at.IsZero() {
		if v.err != nil {
			return nil, time.Time{}, errors.Join(ErrNoQueueView, v.err)
		}
		return nil, time.Time{}, ErrNoQueueView
	}
	return v.qs, v.at, nil
}

// refreshQueues reads every queue once (agents, then unfinished builds),
// as the watcher's polls do: class Poll under the budget.
func (s *Service) refreshQueues() {
	ctx, done := context.WithTimeout(WithClass(s.ctx, Poll), time.Minute)
	defer done()
	at := s.cfg.Now()
	qs, err := s.cfg.Client.Queues(ctx, "")
	v := &s.queues
	v.mu.Lock()
	defer v.mu.Unlock()
	v.refreshing = false
	v.refreshes++
	v.err = err
	if err == nil {
		sort.Slice(qs, func(i, j int) bool { return qs[i].Queue < qs[j].Queue })
		v.qs, v.at = qs, at
		s.rosterSeen(qs, at)
	} else {
		s.logf("queue view: %v", err)
	}
	close(v.refreshed)
}

func (s *Service) serveQueues(w http.ResponseWriter, r *http.Request) {
	qs, err := s.Queues(r.Context(), r.PathValue("queue"))
	var re *RequestError
	switch {
	case errors.As(err, &re):
		writeError(w, http.StatusNotFound, err.Error())
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, "queue status unavailable: "+err.Error())
	case r.PathValue("queue") != "":
		writeJSON(w, http.StatusOK, qs[0])
	default:
		if qs == nil {
			qs = []QueueStatus{}
		}
		writeJSON(w, http.StatusOK, qs)
	}
}

// Queues asks the service for one queue (a name or alias), or every queue
// when queue is "" (kbgen queues --server).
func (r *Remote) Queues(ctx context.Context, queue string) ([]QueueStatus, error) {
	path := "/v1/queues"
	if queue != "" {
		path += "/" + url.PathEscape(queue)
	}
	resp, err := r.do(ctx, http.MethodGet, path, nil)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(io.LimitReader(resp.Body, 16<<20))
	if queue != "" {
		var q QueueStatus
		if err := dec.Decode(&q); err != nil {
			return nil, fmt.Errorf("kbgen serve: GET %s: bad answer: %v", path, err)
		}
		return []QueueStatus{q}, nil
	}
	var qs []QueueStatus
	if err := dec.Decode(&qs); err != nil {
		return nil, fmt.Errorf("kbgen serve: GET %s: bad answer: %v", path, err)
	}
	return qs, nil
}
