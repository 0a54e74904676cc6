// Package bkdoctor is `kbgen doctor --buildkite`: it reads the Buildkite
// organization through the REST API (the pipeline's settings, the API
// token, the connected agents, the rate-limit headers) and says, check by
// check, what is right and what to change (docs/buildkite-setup.md). It
// never prints and changes nothing in the organization.
package bkdoctor

import (
	"context"
	"errors"
	"net/http"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/registry"
)

// Level is a check's verdict.
type Level int

const (
	// Pass: as docs/buildkite-setup.md says.
	Pass Level = iota
	// Warn: kbgen works, but something deserves a look (a vendor queue
	// without agents, a token with more scopes than needed).
	Warn
	// Fail: builds will not run, or not as kbgen needs; Fix says what to
	// change.
	Fail
)

func (l Level) String() string {
	return [...]string{"PASS", "WARN", "FAIL"}[l]
}

// Check is one finding.
type Check struct {
	Name   string
	Level  Level
	Detail string
	// Fix is what to change in the organization; "" when nothing.
	Fix string
}

// Config is what doctor reads and compares against.
type Config struct {
	Client   *client.Client
	Registry *registry.Registry
	// ControlQueue is the control agents' queue; default
	// contract.ControlQueue.
	ControlQueue string
	// APIBudget and UserBudget are kbgen serve's --api-budget and
	// --user-budget, checked against the limits Buildkite reports.
	APIBudget, UserBudget int
	// Others are clients with the other tokens kbgen serve rotates
	// (--token-file): each is checked for its scopes and its user's limit,
	// and all must be different users'.
	Others []*client.Client
}

// UnreachableError is Buildkite not answering (network, 5xx, a rate
// limit that did not clear): nothing could be checked.
type UnreachableError struct{ Err error }

func (e *UnreachableError) Error() string { return "asking Buildkite: " + e.Err.Error() }
func (e *UnreachableError) Unwrap() error { return e.Err }

// ExitCode makes an unreachable Buildkite exit 4 (exitcode.Coder):
// nothing was checked, so no check failed.
func (e *UnreachableError) ExitCode() int { return exitcode.Infra }

// Run reads the organization and returns every check, in order: the
// token, the pipeline's settings, the queues, the rate limits. An error
// is an *UnreachableError only.
func Run(ctx context.Context, cfg Config) ([]Check, error) {
	if cfg.ControlQueue == "" {
		cfg.ControlQueue = contract.ControlQueue
	}
	checks, tokens, err := tokenChecks(ctx, cfg)
	if err != nil {
		return nil, err
	}
	p, lim, err := cfg.Client.Pipeline(ctx)
	if unreachable(err) {
		return nil, &UnreachableError{err}
	}
	checks = append(checks, pipelineChecks(p, err, cfg)...)
	agents, err := cfg.Client.Agents(ctx)
	if unreachable(err) {
		return nil, &UnreachableError{err}
	}
	checks = append(checks, queueChecks(agents, err, cfg)...)
	tokens[0] = newest(tokens[0], lim)
	return append(checks, limitCheck(tokens, cfg)), nil
}

// unreachable tells an answer that says something of the organization
// (401, 403, 404: a check fails) from none at all.
func unreachable(err error) bool {
	var apiErr *client.APIError
	if err == nil {
		return false
	}
	if !errors.As(err, &apiErr) {
		return true
	}
	return apiErr.Status == 0 || apiErr.Status == http.StatusTooManyRequests || apiErr.Status >= 500
}

// Failed counts the failed checks.
func Failed(checks []Check) int {
	n := 0
	for _, c := range checks {
		if c.Level == Fail {
			n++
		}
	}
	return n
}

// apiFailure is a check failed because Buildkite refused a request:
// what the status means for kbgen, and what to change.
func apiFailure(name string, err error, what string) Check {
	var apiErr *client.APIError
	c := Check{Name: name, Level: Fail, Detail: err.Error()}
	if !errors.As(err, &apiErr) {
		return c
	}
	switch apiErr.Status {
	case http.StatusUnauthorized:
		c.Fix = "the API token is revoked, expired or mistyped: create one (docs/buildkite-setup.md#tokens-and-who-holds-them) and set BUILDKITE_API_TOKEN or --token-file"
	case http.StatusForbidden:
		c.Fix = "give the token the scope Buildkite names (" + what + ")"
	case http.StatusNotFound:
		c.Fix = "check --org and --pipeline (BUILDKITE_ORG, BUILDKITE_PIPELINE), and that the token's user may see " + what
	}
	return c
}

// newest is b's headers where it has them, else a's.
func newest(a, b client.Limits) client.Limits {
	if b.Org.Known {
		a.Org = b.Org
	}
	if b.User.Known {
		a.User = b.User
	}
	return a
}
