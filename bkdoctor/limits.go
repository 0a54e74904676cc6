package bkdoctor

import (
	"fmt"
	"strings"

	"github.com/gpu-mode/kbgen/client"
)

const limitsCheckName = "rate limits"

// limitCheck compares the limits Buildkite's answers report
// (rate_limits.md: RateLimit-* for the organization, RateLimit-User-* for
// the token's user) with kbgen serve's budget: its share of the
// organization's minute must fit in it, and its per-token budget must stay
// under each token's user's limit, or serve meets 429s. tokens holds,
// per token, what its newest answer said (the first token's answers
// include the pipeline's).
func limitCheck(tokens []client.Limits, cfg Config) Check {
	org, user := tokens[0].Org, tokens[0].User // the newest answer's
	for _, l := range tokens[1:] {
		if !org.Known {
			org = l.Org
		}
	}
	if !org.Known && !user.Known {
		return Check{Name: limitsCheckName, Level: Warn,
			Detail: "Buildkite's answers carried no RateLimit headers: kbgen serve budgets by --api-budget and --user-budget alone",
			Fix:    fmt.Sprintf("keep them under the limits on Settings → Quotas (a new organization's: %d a minute, %d per user)", client.OrgLimit, client.UserLimit)}
	}
	for _, l := range tokens[1:] {
		if l.User.Known && l.User.Limit < user.Limit {
			user = l.User // the tightest user limit decides --user-budget
		}
	}
	var fails, notes, flags []string
	if org.Known {
		notes = append(notes, fmt.Sprintf("organization %d a minute (%d left now)", org.Limit, org.Remaining))
		if cfg.APIBudget > org.Limit {
			fails = append(fails, fmt.Sprintf("kbgen serve's --api-budget %d is over the organization's %d", cfg.APIBudget, org.Limit))
			flags = append(flags, fmt.Sprintf("--api-budget %d (half the organization's minute: others share it)", max(org.Limit/2, 5)))
		}
	}
	if user.Known {
		notes = append(notes, fmt.Sprintf("user %d a minute (%d left now)", user.Limit, user.Remaining))
		if cfg.UserBudget >= user.Limit {
			fails = append(fails, fmt.Sprintf("kbgen serve's --user-budget %d is not under the user's %d", cfg.UserBudget, user.Limit))
			flags = append(flags, fmt.Sprintf("--user-budget %d (room for the token's user by hand)", max(user.Limit-5, 5)))
		}
	}
	detail := strings.Join(notes, ", ") + fmt.Sprintf("; kbgen serve budgets %d in all and %d per token", cfg.APIBudget, cfg.UserBudget)
	if len(fails) > 0 {
		return Check{Name: limitsCheckName, Level: Fail, Detail: strings.Join(fails, "; ") + ": " + detail,
			Fix: "run kbgen serve with " + strings.Join(flags, " and ") + ", or ask Buildkite for higher limits"}
	}
	if org.Known && org.Remaining < org.Limit/4 {
		return Check{Name: limitsCheckName, Level: Warn, Detail: detail + ": others use most of the organization's minute now",
			Fix: "give kbgen serve less (--api-budget) or find who else spends the organization's limit"}
	}
	return Check{Name: limitsCheckName, Level: Pass, Detail: detail}
}
