package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/buildkite/go-buildkite/v4"
)

// MaxPause is the longest pause Buildkite allows (7 days,
// pages/agent/self-hosted/pausing-and-resuming.md); a longer one is cut.
const MaxPause = 10080 * time.Minute

// ErrNoAgent is a pause or resume of an agent the organization does not
// list as connected (Buildkite pauses only connected agents).
var ErrNoAgent = errors.New("no connected agent of that name")

// PauseAgent pauses the connected agent named name: Buildkite dispatches
// it no job until timeout (rounded up to whole minutes, at most MaxPause)
// or ResumeAgent. The note says why, in Buildkite's UI too. The token
// needs the write_agents scope (pages/apis/rest_api/agents.md).
func (c *Client) PauseAgent(ctx context.Context, name, note string, timeout time.Duration) error {
	id, err := c.agentID(ctx, name)
	if err != nil {
		return err
	}
	minutes := int(min(max(timeout, time.Minute), MaxPause).Round(time.Minute) / time.Minute)
	if _, err := c.bk.Agents.Pause(ctx, c.opts.Org, id, &buildkite.AgentPauseOptions{Note: note, TimeoutInMinutes: minutes}); err != nil {
		return fmt.Errorf("pausing agent %s: %w", name, c.scrub(err))
	}
	return nil
}

// ResumeAgent lets Buildkite dispatch jobs to the agent again.
func (c *Client) ResumeAgent(ctx context.Context, name string) error {
	id, err := c.agentID(ctx, name)
	if err != nil {
		return err
	}
	if _, err := c.bk.Agents.Resume(ctx, c.opts.Org, id); err != nil {
		return fmt.Errorf("resuming agent %s: %w", name, c.scrub(err))
	}
	return nil
}

func (c *Client) agentID(ctx context.Context, name string) (string, error) {
	agents, err := c.listAgents(ctx)
	if err != nil {
		return "", err
	}
	for _, a := range agents {
		if a.Name == name && (a.ConnectedState == "" || a.ConnectedState == "connected") {
			return a.ID, nil
		}
	}
	return "", fmt.Errorf("%w: %q", ErrNoAgent, name)
}
