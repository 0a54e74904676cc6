package bkdoctor

import (
	"fmt"
	"slices"
	"strings"

	buildkite "github.com/buildkite/go-buildkite/v4"

	"github.com/gpu-mode/kbgen/internal/contract"
)

const tokenCheckName = "API token"

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
