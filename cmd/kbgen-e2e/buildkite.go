package main

import (
	"context"
	"errors"
	"fmt"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/e2e"
)

// BuildkiteCmd is the operator's rehearsal: the local Buildkite of the
// end-to-end tests, serving until interrupted.
type BuildkiteCmd struct {
	Listen      string        `default:"127.0.0.1:8080" placeholder:"ADDR" help:"The REST API's address (BUILDKITE_API_URL). Default: ${default}. Example: --listen 127.0.0.1:9080"`
	AgentListen string        `default:"127.0.0.1:8081" placeholder:"ADDR" help:"The Agent API's address (buildkite-agent start --endpoint http://ADDR/v3). Default: ${default}."`
	Agents      []string      `name:"agents" placeholder:"ROOT" help:"Start the agents that 'kbgen node install --root ROOT' (or '--control --root ROOT') wrote, with their config and hooks (repeatable). Example: --agents rehearsal/stage-control --agents rehearsal/stage-node"`
	NoGPU       bool          `name:"no-gpu" help:"Run the GPU agents' steps without GPU flags (KBGEN_SANDBOX_NO_GPU=1): a rehearsal on a machine without the node's GPUs."`
	Webhook     string        `placeholder:"URL" help:"POST signed webhooks (job.finished, build.finished) here, as Buildkite's notification service does: kbgen serve's /v1/buildkite/webhook. Prints the BUILDKITE_WEBHOOK_SECRET to give kbgen serve. Example: --webhook http://127.0.0.1:8090/v1/buildkite/webhook"`
	Kbgen       string        `placeholder:"FILE" help:"The kbgen the agents run (its directory goes first on their PATH). Default: kbgen beside this binary, else on PATH."`
	For         time.Duration `placeholder:"DURATION" help:"Stop after this long (default: serve until interrupted). Example: --for 30m"`
}

// Help is shown after the flags.
func (c *BuildkiteCmd) Help() string {
	return `Starts the local Buildkite the end-to-end tests use, for a rehearsal of the
operator's setup without a Buildkite account (docs/buildkite-setup.md#a-rehearsal-without-a-buildkite-account):
a REST API (builds, jobs, artifacts, agents, pipeline settings) and an Agent
API that real buildkite-agent v3.52.1 processes register with. Every build
starts from the pipeline's settings steps (.buildkite/pipeline-settings.yml:
the bootstrap on kernelbot-control), as on the real organisation. It prints
the env lines for kbgen serve, submit and queues on stdout, then serves
until interrupted (or --for), and stops its agents on the way out.

  kbgen-e2e buildkite --agents rehearsal/stage-control --agents rehearsal/stage-node --no-gpu --webhook http://127.0.0.1:8090/v1/buildkite/webhook`
}

func (c *BuildkiteCmd) Run(s *stdio) error {
	kbgen, err := (&DoctorCmd{Kbgen: c.Kbgen}).kbgen(s.Getenv)
	if err != nil {
		return errors.New(strings.Replace(err.Error(), "doctor --e2e", "buildkite", 1))
	}
	opts := e2e.RehearsalOptions{Listen: c.Listen, AgentListen: c.AgentListen, Roots: c.Agents, Kbgen: kbgen, NoGPU: c.NoGPU, Webhook: c.Webhook,
		Progress: func(format string, args ...any) { fmt.Fprintf(s.Stderr, "kbgen-e2e: "+format+"\n", args...) }}
	if len(c.Agents) > 0 {
		if opts.AgentBinary, err = bkagent.Installed(s.Getenv); err != nil {
			return fmt.Errorf("buildkite: %w", err)
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if c.For > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.For)
		defer cancel()
	}
	r, err := e2e.StartRehearsal(opts)
	if err != nil {
		return fmt.Errorf("buildkite: %w", err)
	}
	printRehearsal(s, r)
	err = serveRehearsal(ctx, s, r)
	fmt.Fprintln(s.Stderr, "kbgen-e2e: stopping the agents and the local Buildkite")
	return errors.Join(err, r.Close())
}

// printRehearsal says where everything is: the env lines on stdout (for
// a shell to paste), the rest on stderr.
func printRehearsal(s *stdio, r *e2e.Rehearsal) {
	srv := r.Server
	fmt.Fprintf(s.Stderr, "kbgen-e2e: local Buildkite for a rehearsal\n  REST API   %s (organization %s, pipeline %s; API token below)\n  Agent API  %s (agent token %s): buildkite-agent start --endpoint %s --token %s --tags queue=QUEUE\n  builds start from the settings steps: the bootstrap on queue %s\n",
		srv.URL(), srv.Org, srv.Pipeline, srv.AgentEndpoint(), srv.AgentToken(), srv.AgentEndpoint(), srv.AgentToken(), contract.ControlQueue)
	for _, kv := range r.Env() {
		fmt.Fprintf(s.Stdout, "export %s\n", kv)
	}
	fmt.Fprintln(s.Stdout, "# serving until interrupted (Ctrl-C)")
}

// serveRehearsal waits for ctx, says when webhooks were delivered or
// refused (kbgen serve answers 2xx only to a valid signature), and fails
// when an agent stops on its own (a wrong config or token): the rehearsal
// would otherwise hang silently.
func serveRehearsal(ctx context.Context, s *stdio, r *e2e.Rehearsal) error {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var sent, failed int
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			if a := r.Exited(); a != nil {
				return fmt.Errorf("buildkite: agent %s stopped:\n%s", a.Name, lastLines(a.Log(), 20))
			}
			if ok, bad := r.Server.WebhooksSent(); ok != sent || bad != failed {
				sent, failed = ok, bad
				fmt.Fprintf(s.Stderr, "kbgen-e2e: webhooks: %d delivered, %d failed\n", sent, failed)
			}
		}
	}
}
