package bkdoctor

import (
	"context"
	"fmt"
	"slices"
	"strings"

	buildkite "github.com/buildkite/go-buildkite/v4"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
)

const tokenCheckName = "API token"

// tokenChecks checks each token (Client's, then Others'), and with several
// that they are different users': kbgen serve's budget adds their
// per-user limits up, which only different users' do. It returns what
// each token's answer said of the rate limits.
func tokenChecks(ctx context.Context, cfg Config) ([]Check, []client.Limits, error) {
	var checks []Check
	var limits []client.Limits
	var users []string
	for i, c := range append([]*client.Client{cfg.Client}, cfg.Others...) {
		t, lim, err := c.AccessToken(ctx)
		if unreachable(err) {
			return nil, nil, &UnreachableError{err}
		}
		check := tokenCheck(t, err)
		if i > 0 {
			check.Name = fmt.Sprintf("%s %d", tokenCheckName, i+1)
		}
		checks, limits = append(checks, check), append(limits, lim)
		if err == nil {
			users = append(users, t.User.Email)
		}
	}
	if len(limits) > 1 {
		checks = append(checks, usersCheck(users, len(limits)))
	}
	return checks, limits, nil
}

// usersCheck fails tokens of one user: they share that user's limit.
func usersCheck(users []string, tokens int) Check {
	const name = "token users"
	seen := map[string]bool{}
	for _, u := range users {
		if seen[u] {
			return Check{Name: name, Level: Fail,
				Detail: fmt.Sprintf("two tokens belong to %s: they share one per-user limit, but kbgen serve budgets --user-budget for each", u),
				Fix:    "give each token of --token-file to a different Buildkite user (docs/backend.md)"}
		}
		seen[u] = true
	}
	return Check{Name: name, Level: Pass, Detail: fmt.Sprintf("%d tokens of %d different users: their per-user limits add up", tokens, len(users))}
}

// tokenCheck compares the token's scopes with contract.APIScopes: each
// missing one fails a command, each extra one is what a leaked token
// could do beyond kbgen's needs.
func tokenCheck(t buildkite.AccessToken, err error) Check {
	if err != nil {
		return apiFailure(tokenCheckName, err, "none needed to read it")
	}
	var missing, extra []string
	for _, s := range contract.APIScopes {
		if !slices.Contains(t.Scopes, s.Name) {
			missing = append(missing, fmt.Sprintf("%s (%s)", s.Name, s.For))
		}
	}
	for _, s := range t.Scopes {
		if !slices.Contains(contract.APIScopeNames(), s) {
			extra = append(extra, s)
		}
	}
	who := fmt.Sprintf("user %q", t.User.Name)
	switch {
	case len(missing) > 0:
		return Check{Name: tokenCheckName, Level: Fail,
			Detail: who + "'s token lacks " + strings.Join(missing, ", "),
			Fix:    "Personal Settings → API Access Tokens → this token: add the missing scopes (docs/buildkite-setup.md#tokens-and-who-holds-them)"}
	case len(extra) > 0:
		return Check{Name: tokenCheckName, Level: Warn,
			Detail: who + "'s token has kbgen's scopes and more: " + strings.Join(extra, ", "),
			Fix:    "remove them: a leaked token can do all its scopes allow, and kbgen needs only " + strings.Join(contract.APIScopeNames(), ", ")}
	}
	return Check{Name: tokenCheckName, Level: Pass, Detail: who + "'s token has exactly " + strings.Join(contract.APIScopeNames(), ", ")}
}
