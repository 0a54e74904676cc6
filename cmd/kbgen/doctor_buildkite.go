package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/bkdoctor"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// runBuildkite is `kbgen doctor --buildkite`: the organization's checks,
// one line each, the fix indented under a FAIL or WARN.
func (c *DoctorCmd) runBuildkite(g *Globals) error {
	reg, err := loadRegistry(g, c.Vendors)
	if err != nil {
		return err
	}
	bk, err := c.newClient(g, true)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	checks, err := bkdoctor.Run(ctx, bkdoctor.Config{Client: bk, Registry: reg, APIBudget: c.APIBudget, UserBudget: c.UserBudget,
		ControlQueue: firstNonEmpty(c.BootstrapQueue, g.Getenv(contract.EnvDefaultBootstrapQueue))})
	if ue := (*bkdoctor.UnreachableError)(nil); errors.As(err, &ue) {
		return withCode(exitcode.Infra, err)
	}
	for _, ch := range checks {
		fmt.Fprintf(g.Stdout, "%s  %s: %s\n", ch.Level, ch.Name, ch.Detail)
		if ch.Fix != "" {
			fmt.Fprintf(g.Stdout, "      fix: %s\n", ch.Fix)
		}
	}
	if n := bkdoctor.Failed(checks); n > 0 {
		fmt.Fprintf(g.Stderr, "kbgen: doctor --buildkite: %d checks failed; see docs/buildkite-setup.md\n", n)
		return silentExit(exitcode.Failure)
	}
	return nil
}
