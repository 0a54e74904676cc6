package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/fleet/verify"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/serve"
)

// VerifyCmd re-measures a finished run through kbgen serve.
type VerifyCmd struct {
	RunID   string        `arg:"" placeholder:"RUN" help:"The run id to re-measure (a finished run kbgen serve still holds)."`
	Count   int           `default:"3" placeholder:"N" help:"How many other agents of the run's hardware re-run it (at most 8)."`
	Server  string        `placeholder:"URL" help:"The kbgen serve at URL (http://127.0.0.1:PORT or unix:/path; default: $KBGEN_SERVER); the bearer token is $KBGEN_SERVER_TOKEN."`
	Timeout time.Duration `default:"1h" help:"Give up waiting after this long (the re-runs go on; ask again later)."`
}

// verifyPoll is how often kbgen verify asks for the verdict.
const verifyPoll = 5 * time.Second

func (c *VerifyCmd) Run(g *Globals) error {
	server := cmp.Or(c.Server, g.Getenv(contract.EnvServer))
	if server == "" {
		return exitcode.With(exitcode.Usage, errors.New("no server: pass --server URL or set KBGEN_SERVER"))
	}
	if c.Count < 1 || c.Count > verify.MaxCount {
		return exitcode.With(exitcode.Usage, fmt.Errorf("--count %d: from 1 to %d", c.Count, verify.MaxCount))
	}
	rem, err := serve.NewRemote(server, g.Getenv(contract.EnvServerToken))
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	ctx, stop := signalContext()
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	rep, err := rem.Verify(ctx, c.RunID, c.Count, verifyPoll)
	var refused *serve.RefusedError
	switch {
	case errors.As(err, &refused):
		return exitcode.With(exitcode.Usage, errors.New(refused.Msg))
	case err != nil && ctx.Err() != nil:
		return exitcode.With(exitcode.Timeout, fmt.Errorf("run %s: no verdict yet (%v); run kbgen verify again to see it", c.RunID, err))
	case err != nil:
		return exitcode.With(exitcode.Infra, err)
	}
	return c.print(g, rep)
}

// print writes the report as JSON on stdout and its verdict on stderr;
// anything but confirmed exits Unconfirmed.
func (c *VerifyCmd) print(g *Globals, rep *verify.Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "%s\n", b)
	fmt.Fprintf(g.Stderr, "kbgen verify: run %s %s: spread %.2f %% (bound %.1f %%) over %d re-runs %s\n",
		rep.RunID, rep.Verdict, 100*rep.Spread, 100*rep.Bound, len(rep.Reruns), rep.Why)
	if rep.Verdict != verify.Confirmed {
		return exitcode.With(exitcode.Unconfirmed, fmt.Errorf("run %s not confirmed: %s", rep.RunID, rep.Verdict))
	}
	return nil
}

// Help is the detailed help under the flags list.
func (c *VerifyCmd) Help() string {
	return `Re-runs a finished run's payload on --count other agents of the same hardware
fingerprint (GPU and CPU model; known from their canaries) through kbgen serve,
and reports the spread of the scores (max - min over the median) against the
bound the queue's noise policy vouches for (max_steal_percent +
max_foreign_percent). Prints the report as JSON; exits 0 when confirmed, 6
when disputed or inconclusive, 2 when the run cannot be verified (unknown, not
finished, no clean score, no other agent). See "Re-measuring a record" in
docs/operations.md.

Example:
  export KBGEN_SERVER=http://127.0.0.1:8077 KBGEN_SERVER_TOKEN=…
  kbgen verify lb-4711 --count 3`
}
