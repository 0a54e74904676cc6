package client

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
)

// TestPauseAgent: a pause through the REST API (the stand-in models
// agents.md's pause and resume) takes the agent out of its queue's idle
// count with its note and timeout, ends by itself after the timeout, and
// resume ends it at once; without write_agents it is refused.
func TestPauseAgent(t *testing.T) {
	r := newRig(t, fakebuildkite.QuickScript)
	ctx := context.Background()
	r.fake.SetAgents([]fakebuildkite.AgentSpec{{Name: "h100-0", Queue: "nvidia-h100"}, {Name: "h100-1", Queue: "nvidia-h100"}})
	if err := r.client.PauseAgent(ctx, "h100-0", "3 faults in a row", time.Hour); !isAPIStatus(err, http.StatusForbidden) {
		t.Fatalf("paused without write_agents: %v", err)
	}
	r.fake.SetTokenScopes(r.fake.Token, append(contract.APIScopeNames(), "write_agents")...)
	idle := func() int {
		qs, err := r.client.Queues(ctx, "nvidia-h100")
		if err != nil {
			t.Fatal(err)
		}
		return qs[0].Idle
	}
	if err := r.client.PauseAgent(ctx, "h100-0", "3 faults in a row", time.Hour); err != nil {
		t.Fatal(err)
	}
	note, until, ok := r.fake.AgentPause("h100-0")
	if !ok || note != "3 faults in a row" || until.Sub(r.clock.Now()) != time.Hour {
		t.Fatalf("pause %q until %s (%v)", note, until, ok)
	}
	if n := idle(); n != 1 {
		t.Fatalf("idle %d with one of two paused, want 1", n)
	}
	if err := r.client.PauseAgent(ctx, "h100-0", "again", time.Hour); !isAPIStatus(err, http.StatusUnprocessableEntity) { // "Agent is already paused"
		t.Errorf("a second pause: %v", err)
	}
	r.clock.Advance(time.Hour)
	if n := idle(); n != 2 {
		t.Errorf("idle %d after the pause's timeout, want 2", n)
	}
	if err := r.client.PauseAgent(ctx, "h100-1", "", 5*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := r.client.ResumeAgent(ctx, "h100-1"); err != nil {
		t.Fatal(err)
	}
	if err := r.client.ResumeAgent(ctx, "h100-1"); !isAPIStatus(err, http.StatusUnprocessableEntity) { // "Agent is not paused"
		t.Errorf("resuming an unpaused agent: %v", err)
	}
	if err := r.client.PauseAgent(ctx, "gone", "", time.Minute); !errors.Is(err, ErrNoAgent) {
		t.Errorf("pausing an unknown agent: %v", err)
	}
}

// isAPIStatus reports whether err is Buildkite's answer with HTTP status
// code (an *APIError): the status says why, its message is Buildkite's.
func isAPIStatus(err error, code int) bool {
	var api *APIError
	return errors.As(err, &api) && api.Status == code
}
