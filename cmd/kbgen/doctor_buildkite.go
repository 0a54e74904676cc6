package main

import (
	"cmp"
	"context"
	"fmt"

	"github.com/gpu-mode/kbgen/bkdoctor"
	"github.com/gpu-mode/kbgen/client"
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
	cfg := bkdoctor.Config{Registry: reg, APIBudget: c.APIBudget, UserBudget: c.UserBudget,
		ControlQueue: cmp.Or(c.BootstrapQueue, g.Getenv(contract.EnvDefaultBootstrapQueue))}
	if cfg.Client, cfg.Others, err = c.clientPerToken(g); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	checks, err := bkdoctor.Run(ctx, cfg)
	if err != nil {
		return err // an *UnreachableError: exit 4
	}
	for _, ch := range checks {
		fmt.Fprintf(g.Stdout, "%s  %s: %s\n", ch.Level, ch.Name, ch.Detail)
		if ch.Fix != "" {
			fmt.Fprintf(g.Stdout, "      fix: %s\n", ch.Fix)
		}
	}
	if n := bkdoctor.Failed(checks); n > 0 {
		fmt.Fprintf(g.Stderr, "kbgen: doctor --buildkite: %d checks failed; see docs/buildkite-setup.md\n", n)
		return exitcode.Silent(exitcode.Failure)
	}
	return nil
}

// clientPerToken is a client for the first token and one for each other
// token kbgen serve would rotate: doctor checks each on its own.
func (c *DoctorCmd) clientPerToken(g *Globals) (*client.Client, []*client.Client, error) {
	var more []string
	first, err := c.newClientWith(g, true, func(o *client.Options) { more, o.MoreTokens = o.MoreTokens, nil })
	if err != nil {
		return nil, nil, err
	}
	var others []*client.Client
	for _, tok := range more {
		oc, err := c.newClientWith(g, true, func(o *client.Options) { o.Token, o.MoreTokens = tok, nil })
		if err != nil {
			return nil, nil, err
		}
		others = append(others, oc)
	}
	return first, others, nil
}
