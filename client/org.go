package client

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	buildkite "github.com/buildkite/go-buildkite/v4"
)

// What `kbgen doctor --buildkite` reads of the organization: the
// pipeline's settings, the token itself and the connected agents, each
// with the rate-limit headers of its answer (rate_limits.md: every answer
// carries both scopes').

// Pipeline reads the pipeline's settings (pipelines.md, "Get a
// pipeline"; scope read_pipelines): its settings steps (`configuration`
// for a YAML pipeline), the intermediate-build settings and the provider's
// trigger settings.
func (c *Client) Pipeline(ctx context.Context) (*buildkite.Pipeline, Limits, error) {
	p, resp, err := c.bk.Pipelines.Get(ctx, c.opts.Org, c.opts.Pipeline)
	if err != nil {
		return nil, limitsOf(resp), fmt.Errorf("reading pipeline %s/%s: %w", c.opts.Org, c.opts.Pipeline, c.scrub(err))
	}
	return &p, limitsOf(resp), nil
}

// AccessToken reads the token the client holds (access_token.md, "Get the
// current token"; no scope needed): its scopes, its user, its expiry.
func (c *Client) AccessToken(ctx context.Context) (buildkite.AccessToken, Limits, error) {
	t, resp, err := c.bk.AccessTokens.Get(ctx)
	if err != nil {
		return t, limitsOf(resp), fmt.Errorf("reading the API token's scopes: %w", c.scrub(err))
	}
	return t, limitsOf(resp), nil
}

// Agents lists the organization's connected agents (agents.md, "List
// agents"; scope read_agents), every page.
func (c *Client) Agents(ctx context.Context) ([]buildkite.Agent, error) {
	return c.listAgents(ctx)
}

// AgentQueue is the queue an agent serves: its `queue=` tag, or
// DefaultQueue for an agent started without one.
func AgentQueue(a buildkite.Agent) string { return agentQueue(a.Metadata) }

func limitsOf(resp *buildkite.Response) Limits {
	if resp == nil || resp.Response == nil {
		return Limits{}
	}
	return ReadLimits(resp.Header)
}

// Limits is what one answer's headers say of both rate limits.
type Limits struct {
	Org, User Limit
}

// Limit is one scope's headers: its Limit and Remaining requests in the
// current window and the seconds to its Reset. Known is false when the
// answer carried no such headers (the stand-in without limits, or a
// Buildkite that stops sending them).
type Limit struct {
	Known            bool
	Limit, Remaining int
	Reset            int
}

// ReadLimits reads both scopes' headers.
func ReadLimits(h http.Header) Limits {
	return Limits{Org: readLimit(h, ScopeOrg), User: readLimit(h, ScopeUser)}
}

func readLimit(h http.Header, scope string) Limit {
	left, reset, ok := LimitLeft(h, scope)
	n, err := strconv.Atoi(strings.TrimSpace(h.Get(limitHeader(scope, "Limit"))))
	if !ok || err != nil {
		return Limit{}
	}
	return Limit{Known: true, Limit: n, Remaining: left, Reset: int(reset.Seconds())}
}
