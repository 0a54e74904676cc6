package main

import (
	"cmp"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/serve"
)

// ServeCmd runs the service the Kernelbot backend talks to.
type ServeCmd struct {
	Listen         string        `required:"" placeholder:"ADDR" help:"Where to listen: 127.0.0.1:PORT (a loopback address; port 0 picks one) or unix:/path/to/socket (mode 0600)."`
	APIBudget      int           `name:"api-budget" default:"${api_budget}" help:"Most Buildkite REST requests per minute kbgen serve makes with all its tokens together (a new organization's limit is 200, shared with everyone in it)."`
	UserBudget     int           `name:"user-budget" default:"${user_budget}" help:"Most requests per minute with each token (Buildkite limits each user to 50 a minute by default); several tokens of different users (--token-file, one a line) add up, to --api-budget at most."`
	Name           string        `default:"kbgen" help:"Tags this service's builds (meta-data kbgen_service=NAME); a restarted service resumes the builds of its name."`
	PollInterval   time.Duration `name:"poll-interval" help:"Interval of the one watcher (default: derived from --api-budget; 5s when a webhook secret or token is set)."`
	RecoverWindow  time.Duration `name:"recover-window" default:"1h" help:"On start, finished builds this recent are found again (running ones at any age)."`
	KeepDone       time.Duration `name:"keep-done" default:"24h" help:"How long a finished run's result stays available to GET /v1/runs/ID."`
	BootstrapQueue string        `name:"bootstrap-queue" placeholder:"QUEUE" help:"Default: KBGEN_BOOTSTRAP_QUEUE. Queue of Kernelbot's control agents that run the bootstrap step and sign the pipeline, for every run that names none (Kernelbot's launcher names none). See docs/security.md."`
	OrphanGrace    time.Duration `name:"orphan-grace" default:"2m" help:"Cancel a run whose client's event stream closed and no client re-attached within this long (a restarted Kernelbot backend never does); 0 never cancels."`
	Store          string        `placeholder:"PATH" help:"SQLite file of the fleet's history (runs, facts, roster); default $XDG_STATE_HOME/kbgen/serve-NAME.db, else ~/.local/state/kbgen/serve-NAME.db: one per --name. 'off' keeps none."`
	DatabaseURL    string        `name:"database-url" placeholder:"DSN" help:"PostgreSQL instead of SQLite, for hosts whose disk does not survive a redeploy (default: KBGEN_DATABASE_URL, which keeps the password out of the process list)."`
	Retention      time.Duration `default:"720h" help:"How long the store keeps finished runs."`
	Vendors        string        `help:"Vendor registry YAML replacing the built-in one, to check each run's queue against (an alias such as h100 becomes its queue name). Default: KBGEN_VENDORS." placeholder:"FILE"`

	BuildkiteFlags `embed:""`
	canaryFlags    `embed:""`
}

func (c *ServeCmd) Run(g *Globals) error {
	serverToken := g.Getenv(contract.EnvServerToken)
	endpoint, err := serve.ParseListen(c.Listen, serverToken)
	if err != nil {
		return err
	}
	if err := serve.CheckTokens(serverToken, g.Getenv(contract.EnvViewToken)); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	reg, err := loadRegistry(g, c.Vendors)
	if err != nil {
		return err
	}
	canaries, err := c.canaryFlags.config()
	if err != nil {
		return err
	}
	var budget *serve.Budget
	bk, err := c.newClientWith(g, true, func(o *client.Options) {
		var rotate []string
		if len(o.MoreTokens) > 0 {
			rotate = append([]string{o.Token}, o.MoreTokens...)
		}
		budget = serve.NewUserBudget(c.APIBudget, c.UserBudget, rotate)
		o.WrapAPI = budget.Transport
		// The watcher polls again soon: a failed poll is not worth
		// half a minute of retries.
		o.Retry = client.Retry{Attempts: 3, BaseDelay: 500 * time.Millisecond, MaxDelay: 4 * time.Second, MaxRateLimitWait: 60 * time.Second}
	})
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	st, said, err := c.openStore(ctx, g)
	if err != nil {
		return err
	}
	if st != nil {
		defer st.Close()
	}
	fmt.Fprintf(g.Stderr, "kbgen serve: %s\n", said)
	svc, err := serve.New(serve.Config{
		Client: bk, Budget: budget, Name: c.Name, PollEvery: c.PollInterval, RecoverWindow: c.RecoverWindow, KeepDone: c.KeepDone,
		WebhookSecret: g.Getenv(contract.EnvWebhookSecret), WebhookToken: g.Getenv(contract.EnvWebhookToken),
		Registry: reg, Log: g.Stderr, OrphanGrace: orphanGrace(c.OrphanGrace), ViewToken: g.Getenv(contract.EnvViewToken), Store: st, Canary: canaries,
		BootstrapQueue: cmp.Or(c.BootstrapQueue, g.Getenv(contract.EnvDefaultBootstrapQueue)),
	})
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	return svc.Run(ctx, endpoint, serverToken, serve.DefaultLimits)
}

// orphanGrace maps --orphan-grace 0 (never) to the service's "never".
func orphanGrace(d time.Duration) time.Duration {
	if d <= 0 {
		return -1
	}
	return d
}

// Help is the detailed help under the flags list.
func (c *ServeCmd) Help() string {
	return `A long-running service the Kernelbot backend runs beside itself: it takes
runs over a JSON API, creates one build each, and watches all of them with one
poller whose requests do not grow with the number in flight, within
--api-budget requests a minute (never a 429). Buildkite webhooks
(POST /v1/buildkite/webhook) make detection immediate. Killed and restarted,
it finds its builds by meta-data and resumes them. See docs/backend.md.

Environment:
  BUILDKITE_API_TOKEN       the Buildkite token (or --token-file); never leaves the service
  KBGEN_SERVER_TOKEN        bearer token clients must send (required on TCP)
  KBGEN_VIEW_TOKEN          read-only bearer token: GET /metrics only (never submits or cancels)
  BUILDKITE_WEBHOOK_SECRET  webhook signing secret (X-Buildkite-Signature), or
  BUILDKITE_WEBHOOK_TOKEN   webhook token (X-Buildkite-Token)
  KBGEN_DATABASE_URL        PostgreSQL DSN of the store (--database-url)

API: POST /v1/runs, GET /v1/runs/ID, GET /v1/runs/ID/events, DELETE /v1/runs/ID,
GET /v1/queues, GET /v1/queues/QUEUE, GET /, GET /metrics (Prometheus; see
"Watching the fleet" in docs/operations.md), GET /v1/canaries (--canary-every),
POST /v1/runs/ID/verify (kbgen verify).

Example:
  export BUILDKITE_API_TOKEN=… BUILDKITE_ORG=gpu-mode BUILDKITE_PIPELINE=kernelbot KBGEN_SERVER_TOKEN=…
  kbgen serve --listen 127.0.0.1:8077
  kbgen submit --server http://127.0.0.1:8077 --queue h100 -f job.json`
}
