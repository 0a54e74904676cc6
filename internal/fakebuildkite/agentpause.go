package fakebuildkite

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Pausing and resuming an agent, as the REST API documents them
// (pages/apis/rest_api/agents.md in buildkite/docs, "Pause an agent",
// "Resume an agent"): PUT …/agents/{id}/pause with an optional note and
// timeout_in_minutes, PUT …/agents/{id}/resume; scope write_agents;
// 204 No Content; 404 "No agent found"; 422 "Agent is already paused" /
// "Agent is not paused". A pause ends by itself after its timeout: 5
// minutes by default, 10,080 at most
// (pages/agent/self-hosted/pausing-and-resuming.md).

const (
	defaultPauseMinutes = 5
	maxPauseMinutes     = 10080
)

// pauseState is one agent's pause.
type pauseState struct {
	note  string
	until time.Time
}

// agentPausedLocked reports whether agent i is paused now (its own
// AgentSpec.Paused, or a pause through the API not yet timed out).
func (s *Server) agentPausedLocked(i int) (bool, *pauseState) {
	if s.agents[i].Paused {
		return true, nil
	}
	p := s.pauses[s.agents[i].Name]
	if p != nil && s.now().Before(p.until) {
		return true, p
	}
	return false, nil
}

// serveAgentPause answers PUT …/agents/{id}/pause and …/resume.
func (s *Server) serveAgentPause(w http.ResponseWriter, r *http.Request, id, verb string) {
	var body struct {
		Note    string `json:"note"`
		Timeout *int   `json:"timeout_in_minutes"`
	}
	data, _ := io.ReadAll(io.LimitReader(r.Body, 64<<10))
	if len(data) > 0 && json.Unmarshal(data, &body) != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.agentIndexLocked(id)
	if i < 0 {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "No agent found"})
		return
	}
	paused, _ := s.agentPausedLocked(i)
	switch {
	case verb == "pause" && paused:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Agent is already paused"})
	case verb == "resume" && !paused:
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Agent is not paused"})
	case verb == "pause":
		minutes := defaultPauseMinutes
		if body.Timeout != nil {
			minutes = min(max(*body.Timeout, 1), maxPauseMinutes)
		}
		s.pauses[s.agents[i].Name] = &pauseState{note: body.Note, until: s.now().Add(time.Duration(minutes) * time.Minute)}
		w.WriteHeader(http.StatusNoContent)
	default:
		s.agents[i].Paused = false
		delete(s.pauses, s.agents[i].Name)
		w.WriteHeader(http.StatusNoContent)
	}
}

func agentID(i int) string { return fmt.Sprintf("agent-%d", i) }

func (s *Server) agentIndexLocked(id string) int {
	for i := range s.agents {
		if agentID(i) == id {
			return i
		}
	}
	return -1
}

// AgentPause is an agent's pause through the API as the stand-in holds it
// (tests): its note and when it ends; ok false when not paused that way.
func (s *Server) AgentPause(name string) (note string, until time.Time, ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.agents {
		if s.agents[i].Name == name {
			if paused, p := s.agentPausedLocked(i); paused && p != nil {
				return p.note, p.until, true
			}
		}
	}
	return "", time.Time{}, false
}
