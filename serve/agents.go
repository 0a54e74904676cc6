package serve

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/fleet/roster"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/contract"
)

// The roster's side of the service: the agents seen, lost and
// quarantined (package fleet/roster), their API, and how they change the
// queue status Kernelbot reads.

// DefaultQuarantine is a quarantine's timeout when the request names none.
const DefaultQuarantine = time.Hour

// QuarantineRequest is the body of POST /v1/agents/{name}/quarantine.
type QuarantineRequest struct {
	Note           string  `json:"note"`
	TimeoutMinutes float64 `json:"timeout_minutes,omitempty"`
}

// Roster is the service's roster.
func (s *Service) Roster() *roster.Roster { return s.roster }

// initRoster makes the roster, restores it from the store and keeps its
// changes there.
func (s *Service) initRoster() {
	s.roster = roster.New()
	s.roster.OnChange = s.agentInfo
	if s.cfg.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if agents, err := s.cfg.Store.Agents(ctx); err != nil {
		s.logf("store: roster not restored: %v", err)
	} else {
		s.roster.Load(agents)
		for _, a := range agents {
			s.agentInfo(a)
		}
	}
	s.agentq = make(chan roster.Agent, storeQueue)
	s.roster.OnChange = func(a roster.Agent) {
		s.agentInfo(a)
		select {
		case s.agentq <- a:
		default:
			go s.logf("store: %d agent records waiting; %s's change is not kept", storeQueue, a.Name)
		}
	}
}

// agentInfo gives kbgen_agent_info what the roster knows of an agent (its
// node and GPUs from its latest facts, else from node install's tags), so
// an agent that has not run a job since the start (installed, or known
// before a restart) has its series too.
func (s *Service) agentInfo(a roster.Agent) {
	s.metrics.AgentInfo(runfacts.Facts{Agent: a.Name, Queue: a.Queue, Node: a.Node, GPUUUIDs: a.GPUUUIDs, GPUModel: a.GPUModel,
		Driver: a.Driver, KbgenVersion: a.KbgenVersion})
}

// rosterSeen takes a fresh queue view into the roster.
func (s *Service) rosterSeen(qs []client.QueueStatus, at time.Time) {
	var seen []roster.Seen
	for _, q := range qs {
		for _, a := range q.Agents {
			seen = append(seen, roster.Seen{Name: a.Name, Queue: q.Queue, Busy: a.Busy, Paused: a.Paused,
				Node: a.Tags[contract.NodeTag], GPUs: contract.GPUsFromTag(a.Tags[contract.GPUsTag])})
		}
	}
	s.roster.Connected(seen, at)
}

// withoutUnavailable takes out of each queue's idle count the agents the
// roster knows are lost or quarantined though the cached view still
// lists them idle (a webhook or a pause newer than the view): Kernelbot
// reads idle as available_runners.
func (s *Service) withoutUnavailable(qs []QueueStatus) {
	for i := range qs {
		gone := s.roster.Unavailable(qs[i].Queue)
		if len(gone) == 0 {
			continue
		}
		agents := make([]client.Agent, len(qs[i].Agents))
		copy(agents, qs[i].Agents)
		for j, a := range agents {
			if gone[a.Name] && !a.Busy && !a.Paused {
				agents[j].Paused = true
				qs[i].Idle = max(qs[i].Idle-1, 0)
			}
		}
		qs[i].Agents = agents
	}
}

// agentHint is what an agent webhook says (pages/apis/webhooks: the
// agent as the REST API shows it).
type agentHint struct {
	Agent struct {
		Name     string   `json:"name"`
		MetaData []string `json:"meta_data"`
	} `json:"agent"`
}

// agentWebhook takes an authenticated agent.* webhook into the roster;
// false for any other event.
func (s *Service) agentWebhook(event string, body []byte) bool {
	if !strings.HasPrefix(event, "agent.") {
		return false
	}
	var h agentHint
	if json.Unmarshal(body, &h) != nil || h.Agent.Name == "" {
		return false
	}
	queue := ""
	for _, kv := range h.Agent.MetaData {
		if v, ok := strings.CutPrefix(kv, "queue="); ok {
			queue = v
		}
	}
	return s.roster.Event(event, h.Agent.Name, queue, s.cfg.Now())
}

func (s *Service) serveAgents(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.roster.List())
}

// serveQuarantine pauses an agent through Buildkite (client.PauseAgent:
// the token needs write_agents) with a note and a timeout, and marks it
// quarantined in the roster.
func (s *Service) serveQuarantine(w http.ResponseWriter, r *http.Request) {
	var req QuarantineRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, 64<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil && !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "body is not a quarantine request: "+err.Error())
		return
	}
	timeout := DefaultQuarantine
	if req.TimeoutMinutes > 0 {
		timeout = min(time.Duration(req.TimeoutMinutes*float64(time.Minute)), client.MaxPause)
	}
	name := r.PathValue("name")
	note := "kbgen serve quarantine"
	if req.Note != "" {
		note += ": " + req.Note
	}
	if err := s.cfg.Client.PauseAgent(WithClass(r.Context(), Urgent), name, note, timeout); err != nil {
		s.agentError(w, err)
		return
	}
	now := s.cfg.Now()
	s.roster.Quarantined(name, note, now.Add(timeout), now)
	s.logf("agent %s quarantined for %s: %s", name, timeout, note)
	writeJSON(w, http.StatusOK, map[string]any{"agent": name, "paused_until": now.Add(timeout)})
}

func (s *Service) serveResume(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.cfg.Client.ResumeAgent(WithClass(r.Context(), Urgent), name); err != nil {
		s.agentError(w, err)
		return
	}
	s.roster.Resumed(name, s.cfg.Now())
	s.logf("agent %s resumed", name)
	writeJSON(w, http.StatusOK, map[string]any{"agent": name, "resumed": true})
}

func (s *Service) agentError(w http.ResponseWriter, err error) {
	code := http.StatusBadGateway
	if errors.Is(err, client.ErrNoAgent) {
		code = http.StatusNotFound
	}
	writeError(w, code, err.Error())
}
