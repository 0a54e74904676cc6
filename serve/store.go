package serve

import (
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/client"
)

// store holds the runs by id and by build number. A done run stays for
// Config.KeepDone (a client may come back for its result; the result
// itself is in the keeper, within its budgets), then prune drops it.
type store struct {
	mu      sync.Mutex
	byID    map[string]*Run
	byBuild map[int]*Run
	// onDone is called once per run as it finishes (fleet.go's metrics).
	onDone func(*Run, client.Status)
}

func newStore() *store {
	return &store{byID: map[string]*Run{}, byBuild: map[int]*Run{}}
}

// add returns the run with req's id, creating it when new (fresh true).
func (s *store) add(req RunRequest, now time.Time) (r *Run, fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.byID[req.RunID]; r != nil {
		return r, false
	}
	r = newRun(req, now)
	r.onDone = s.onDone
	s.byID[req.RunID] = r
	return r, true
}

// adopt adds a run found on Buildkite; an existing run of that id wins.
func (s *store) adopt(r *Run) *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.byID[r.ID]; old != nil {
		return old
	}
	s.byID[r.ID] = r
	r.onDone = s.onDone
	if r.build != 0 {
		s.byBuild[r.build] = r
	}
	return r
}

func (s *store) get(id string) *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byID[id]
}

func (s *store) linkBuild(r *Run, number int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.byBuild[number] = r
}

func (s *store) byNumber(n int) *Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.byBuild[n]
}

// active lists runs whose build exists and has no outcome yet, or whose
// build has not reached its final state (Run.watched).
func (s *store) active() []*Run {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Run
	for _, r := range s.byBuild {
		if r.watched() {
			out = append(out, r)
		}
	}
	return out
}

// counts reports how many runs there are and how many are not done.
func (s *store) counts() (total, open int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.byID {
		total++
		if !r.Done() {
			open++
		}
	}
	return total, open
}

// prune drops runs done before cutoff, and their kept results from k
// (nil: none kept); it returns how many.
func (s *store) prune(cutoff time.Time, k *keeper) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for id, r := range s.byID {
		r.mu.Lock()
		old := r.done && r.doneAt.Before(cutoff)
		build, res := r.build, r.result
		r.mu.Unlock()
		if old {
			if k != nil {
				k.release(res)
			}
			delete(s.byID, id)
			if s.byBuild[build] == r {
				delete(s.byBuild, build)
			}
			n++
		}
	}
	return n
}
