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
	Listen         string        `required:"" placeholder:"ADDR" help:"Where to listen: 127.0.0.1:PORT (a loopback address; port 0 picks one) or unix:/path/to/socket (mode 0600); with --tls-cert and --tls-key any HOST:PORT (a private network between hosts)."`
	TLSCert        string        `name:"tls-cert" placeholder:"FILE" type:"existingfile" help:"Serve HTTPS with this certificate (PEM, the chain after it), so the bearer token never crosses a network in plain HTTP; needs --tls-key. Read at start: restart to rotate."`
	TLSKey         string        `name:"tls-key" placeholder:"FILE" type:"existingfile" help:"The private key (PEM) of --tls-cert."`
	APIBudget      int           `name:"api-budget" default:"${api_budget}" help:"Most Buildkite REST requests per minute kbgen serve makes with all its tokens together (a new organization's limit is 200, shared with everyone in it)."`
	UserBudget     int           `name:"user-budget" default:"${user_budget}" help:"Most requests per minute with each token (Buildkite limits each user to 50 a minute by default); several tokens of different users (--token-file, one a line) add up, to --api-budget at most."`
	Name           string        `default:"kbgen" help:"Tags this service's builds (meta-data kbgen_service=NAME); a restarted service resumes the builds of its name."`
	PollInterval   time.Duration `name:"poll-interval" help:"Interval of the one watcher (default: derived from --api-budget; 5s when a webhook secret or token is set)."`
	RecoverWindow  time.Duration `name:"recover-window" default:"1h" help:"On start, finished builds this recent are found again (running ones at any age)."`
	KeepDone       time.Duration `name:"keep-done" default:"24h" help:"How long a finished run's result stays available to GET /v1/runs/ID."`
	BootstrapQueue string        `name:"bootstrap-queue" placeholder:"QUEUE" help:"Default: KBGEN_BOOTSTRAP_QUEUE. Queue of Kernelbot's control agents that run the bootstrap step and sign the pipeline, for every run that names none (Kernelbot's launcher names none). See docs/security.md."`
	OrphanGrace    time.Duration `name:"orphan-grace" default:"60s" help:"Cancel a run that no client follows (no event stream open, no GET) for this long since its POST or its last stream: a restarted Kernelbot backend never comes back for its runs; a run submitted with \"detach\": true is never canceled so; 0 never cancels."`
	Heartbeat      time.Duration `default:"15s" help:"Interval of the heartbeat line ({\"event\":\"heartbeat\"}) on every event stream, so a proxy's read timeout (nginx: 60s) never cuts a quiet one; at most 20s."`
	OrgLimit       int           `name:"org-limit" default:"${org_limit}" help:"The organization's REST limit a minute (Buildkite's default; kbgen doctor --buildkite reads yours): --api-budget over it is refused."`
	UserLimit      int           `name:"user-limit" default:"${user_limit}" help:"Each user's REST limit a minute (Buildkite's default): --user-budget over it is refused."`
	Store          string        `placeholder:"PATH" help:"SQLite file of the fleet's history (runs, facts, roster); default $XDG_STATE_HOME/kbgen/serve-NAME.db, else ~/.local/state/kbgen/serve-NAME.db: one per --name. 'off' keeps none."`
	DatabaseURL    string        `name:"database-url" placeholder:"DSN" help:"PostgreSQL instead of SQLite, for hosts whose disk does not survive a redeploy (default: KBGEN_DATABASE_URL, which keeps the password out of the process list)."`
	Retention      time.Duration `default:"720h" help:"How long the store keeps finished runs."`
	Alerts         string        `placeholder:"FILE" help:"Alerts config (YAML: receivers, Slack incoming webhooks or JSON webhooks, by url or url_file; routes by vendor and queue); see \"Alerts and routing\" in docs/operations.md. Its ledger is the store's (--store off: in memory, lost on restart). Default: no alerts."`
	VendorTokens   string        `name:"vendor-tokens" placeholder:"FILE" help:"JSON list of {\"vendor\", \"token\", \"queues\"}: each vendor's token opens /dashboard showing only its queues (see docs/operations.md)."`
	Vendors        string        `help:"Vendor registry YAML replacing the built-in one, to check each run's queue against (an alias such as h100 becomes its queue name). Default: KBGEN_VENDORS." placeholder:"FILE"`

	BuildkiteFlags `embed:""`
	canaryFlags    `embed:""`
}

func (c *ServeCmd) Run(g *Globals) error {
	if err := serve.CheckBudget(c.APIBudget, c.UserBudget, c.OrgLimit, c.UserLimit); err != nil {
		return err
	}
	if c.Heartbeat <= 0 {
		return exitcode.Usagef("--heartbeat %s: the interval must be over 0 (at most %s)", c.Heartbeat, serve.MaxHeartbeat)
	}
	serverToken := g.Getenv(contract.EnvServerToken)
	endpoint, err := serve.ParseListenTLS(c.Listen, serverToken, c.TLSCert, c.TLSKey)
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
	vendors, err := loadVendorTokens(c.VendorTokens)
	if err != nil {
		return err
	}
	alerts, err := loadAlerts(c.Alerts)
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
		Registry: reg, Log: g.Stderr, OrphanGrace: orphanGrace(c.OrphanGrace), Heartbeat: c.Heartbeat,
		ViewToken: g.Getenv(contract.EnvViewToken), Store: st, VendorTokens: vendors, Alerts: alerts, Canary: canaries,
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
it finds its builds by meta-data and resumes them. A second service of the
same --name on the pipeline is reported (health 503, a WARNING line). See
docs/backend.md; deploying it beside Kernelbot: docs/serve-deployment.md.

Environment:
  BUILDKITE_API_TOKEN       the Buildkite token (or --token-file); never leaves the service
  KBGEN_SERVER_TOKEN        bearer token clients must send (required on TCP)
  KBGEN_VIEW_TOKEN          read-only bearer token: /metrics, /v1/agents, /dashboard (never submits,
                            cancels or quarantines)
  BUILDKITE_WEBHOOK_SECRET  webhook signing secret (X-Buildkite-Signature), or
  BUILDKITE_WEBHOOK_TOKEN   webhook token (X-Buildkite-Token)
  KBGEN_DATABASE_URL        PostgreSQL DSN of the store (--database-url)

API: POST /v1/runs, GET /v1/runs/ID, GET /v1/runs/ID/events, DELETE /v1/runs/ID,
GET /v1/queues, GET /v1/queues/QUEUE, GET / (health; kbgen health URL asks it),
GET /metrics (Prometheus), GET /dashboard, GET /v1/agents,
POST /v1/agents/NAME/quarantine|resume, GET /v1/canaries (--canary-every),
POST /v1/runs/ID/verify (kbgen verify) (see "Watching the fleet" in
docs/operations.md).

Example:
  export BUILDKITE_API_TOKEN=… BUILDKITE_ORG=gpu-mode BUILDKITE_PIPELINE=kernelbot KBGEN_SERVER_TOKEN=…
  kbgen serve --listen 127.0.0.1:8077
  kbgen submit --server http://127.0.0.1:8077 --queue h100 -f job.json`
}
