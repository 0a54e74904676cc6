package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/serve"
)

// QueuesCmd shows GPU capacity and backlog per queue.
type QueuesCmd struct {
	Queue  string `arg:"" optional:"" placeholder:"QUEUE" help:"Show only this queue (shown even with no agents): a queue of the vendor registry or its alias, e.g. h100 for nvidia-h100."`
	JSON   bool   `name:"json" help:"Print a JSON array of {queue, total, idle, busy, waiting, agents:[{name, version, busy, paused, job}]} (through --server also running and as_of)."`
	Server string `placeholder:"URL" help:"Ask a kbgen serve at URL (http://127.0.0.1:PORT or unix:/path; default: $KBGEN_SERVER) instead of Buildkite: its cached view, no Buildkite request. The bearer token is $KBGEN_SERVER_TOKEN."`

	QueueCheck `embed:""`

	BuildkiteFlags `embed:""`
}

func (c *QueuesCmd) Run(g *Globals) error {
	queue, err := c.resolve(g, c.Queue)
	if err != nil {
		return err
	}
	c.Queue = queue
	if server := cmp.Or(c.Server, g.Getenv(contract.EnvServer)); server != "" {
		return c.viaServer(g, server)
	}
	bk, err := c.newClient(g, true)
	if err != nil {
		return err
	}
	qs, err := bk.Queues(context.Background(), c.Queue)
	if err != nil {
		return exitcode.With(exitcode.Infra, err)
	}
	return c.print(g, qs, qs)
}

// viaServer prints the queues as a kbgen serve's cached view has them.
func (c *QueuesCmd) viaServer(g *Globals, url string) error {
	rem, err := serve.NewRemote(url, g.Getenv(contract.EnvServerToken))
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	views, err := rem.Queues(context.Background(), c.Queue)
	var refused *serve.RefusedError
	switch {
	case errors.As(err, &refused) && refused.Status == http.StatusUnauthorized:
		return exitcode.With(exitcode.Usage, errors.New(refused.Msg))
	case errors.As(err, &refused) && refused.Status == http.StatusNotFound:
		return exitcode.With(exitcode.Usage, errors.New(refused.Msg))
	case err != nil:
		return exitcode.With(exitcode.Infra, err)
	}
	qs := make([]client.QueueStatus, len(views))
	for i, v := range views {
		qs[i] = v.QueueStatus
	}
	return c.print(g, qs, views)
}

// print writes the table, or asJSON with --json.
func (c *QueuesCmd) print(g *Globals, qs []client.QueueStatus, asJSON any) error {
	if !c.JSON {
		return client.WriteQueueTable(g.Stdout, qs)
	}
	b, err := json.MarshalIndent(asJSON, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "%s\n", b)
	return nil
}

// Help is the detailed help under the flags list.
func (c *QueuesCmd) Help() string {
	return `Agents come from the Agents API, grouped by their queue= tag (untagged
agents are in "default"); busy agents run a job, paused ones take none.
WAITING counts the pipeline's scheduled or running builds for the queue (its
meta-data queue) with no job on an agent yet: the queue length Kernelbot shows.
A QUEUE is read from the vendor registry as submit reads --queue: an alias
(h100) shows its queue (nvidia-h100), a name the registry does not list is
refused (exit 2) unless --allow-unknown-queue. Exit code 4 when the API
cannot be read.

With --server (or KBGEN_SERVER) the same table comes from a kbgen serve's one
cached view (GET /v1/queues, refreshed at most every 15 s within its API
budget): what Kernelbot's BuildkiteLauncher.get_queue_status reads.

Examples:
  kbgen queues
  kbgen queues h100 --json
  kbgen queues --server http://127.0.0.1:8077 h100`
}
