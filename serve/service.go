package serve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/dashboard"
	"github.com/gpu-mode/kbgen/fleet/metrics"
	"github.com/gpu-mode/kbgen/fleet/roster"
	fleetstore "github.com/gpu-mode/kbgen/fleet/store"
	"github.com/gpu-mode/kbgen/registry"
)

// MetaDataService is the build meta-data key naming the service that owns
// a build; its value is Config.Name. The watcher's list requests and the
// startup scan filter on it.
const MetaDataService = "kbgen_service"

// MetaDataDeadline carries a run's deadline (RFC 3339) so that it
// survives a restart.
const MetaDataDeadline = "kbgen_deadline"

// MetaDataDetach is "true" on the build of a run submitted with
// RunRequest.Detach, so that a restart does not take it for orphaned.
const MetaDataDetach = "kbgen_detach"

// Config is what a Service needs.
type Config struct {
	// Client talks to Buildkite; its API transport must go through Budget
	// (client.Options.WrapAPI = Budget.Transport).
	Client *client.Client
	Budget *Budget
	// Name tags the service's builds (meta-data kbgen_service); default
	// "kbgen". Two services on one pipeline need two names.
	Name string
	// PollEvery is the watcher's interval; 0 derives it from the budget.
	PollEvery time.Duration
	// Webhooks: when either is set, webhooks are expected and the poller
	// becomes a slower safety net (SafetyPoll).
	WebhookSecret, WebhookToken string
	// ReplayWindow bounds the age of a signed webhook; default 5 minutes.
	ReplayWindow time.Duration
	// RecoverWindow is how far back the startup scan looks for finished
	// builds; default 1 hour. Builds still running are found at any age.
	RecoverWindow time.Duration
	// KeepDone is how long a done run is kept for clients to fetch;
	// default 24 hours. A run id re-submitted after that (and outside
	// RecoverWindow after a restart) would create a new build.
	KeepDone time.Duration
	// SpillDir is where results too large for memory are kept (a
	// directory kbgen serve makes there, removed when it stops); default
	// the system's temporary directory.
	SpillDir string
	// ResultMemory bounds the results kept in memory, ResultInMemoryMax
	// one result kept in memory (a larger one goes to disk at once), and
	// ResultDisk those on disk (past it the oldest is dropped, and its
	// run's status says so). Defaults: 64 MiB, 1 MiB, 2 GiB.
	ResultMemory, ResultInMemoryMax, ResultDisk int64
	// Registry, when set, checks each run's queue and turns an alias
	// (h100) into the queue name (nvidia-h100), as kbgen submit does.
	Registry *registry.Registry
	// BootstrapQueue is the bootstrap queue of a run that names none: the
	// queue of Kernelbot's control agents that hold the signing key (kbgen
	// serve --bootstrap-queue, KBGEN_BOOTSTRAP_QUEUE). Without it a client
	// that does not send bootstrap_queue (Kernelbot's launcher) gets an
	// unsigned pipeline, which a node with a verification key refuses.
	BootstrapQueue string
	// QueueTTL is how old the cached queue view (GET /v1/queues) may be
	// before a request refreshes it; default DefaultQueueTTL.
	QueueTTL time.Duration
	// OrphanGrace is how long a run may go without a client (no event
	// stream open, no GET, since its POST or its last stream) before it
	// is canceled, detached runs excepted (orphan.go); default
	// DefaultOrphanGrace, negative: never.
	OrphanGrace time.Duration
	// Heartbeat is the interval of the heartbeat line on every event
	// stream (heartbeat.go); default DefaultHeartbeat, at most
	// MaxHeartbeat.
	Heartbeat time.Duration
	// ViewToken, when set, is a read-only bearer token: GET /metrics
	// takes it as well as the server token; nothing else does
	// (KBGEN_VIEW_TOKEN; CheckTokens).
	ViewToken string
	// Alerts, when set, turns on kbgen serve's own alerting (--alerts;
	// package fleet/alert); its ledger is Store's when there is one.
	Alerts *alert.Config
	// AlertEvery is how often the alerts judge the fleet; default 15 s.
	AlertEvery time.Duration
	// Canaries feeds the alerts' canary_drift condition; nil: the
	// canaries' verdicts when Canary is on (alerts.go), else nothing (the
	// condition says nothing).
	Canaries alert.CanarySource
	// VendorTokens are vendors' dashboard tokens: each sees only its
	// queues (--vendor-tokens).
	VendorTokens []dashboard.Scope
	// Metrics records the service's series (GET /metrics); nil: its own.
	Metrics *metrics.Recorder
	// Store, when set, keeps finished runs and their facts across
	// restarts (fleet/store); the caller opens and closes it.
	Store *fleetstore.Store
	// Canary turns the canaries on (canary.go).
	Canary CanaryConfig
	// Log receives one line per notable event; never the token.
	Log io.Writer
	Now func() time.Time // default time.Now
}

// webhookRoom is the requests a window keeps for polls woken by webhooks
// and for result fetches, beyond the safety poll's.
const webhookRoom = 8

// SafetyPoll is the interval of the poller when webhooks are configured:
// it only catches lost webhooks.
const SafetyPoll = 5 * time.Second

// Service is a running kbgen serve.
type Service struct {
	cfg     Config
	runs    *store
	pending *createQueue
	kick    chan struct{}
	fetchq  chan *Run
	logMu   sync.Mutex
	poller  poller
	queues  queueView
	ctx     context.Context
	// webhookSlots bounds webhook bodies read at once (HTTPServer sets
	// it; nil: no bound).
	webhookSlots chan struct{}
	// ready is closed once the startup scan has found the service's
	// builds: no create goes out before, so a re-submitted run id
	// attaches to its build instead of making a second.
	ready  chan struct{}
	downMu sync.Mutex
	down   *outage // Buildkite unreachable at start; nil once found
	keep   *keeper
	// instance is this process's id on its builds (twin.go); started,
	// when it started; twin, another service of its name once seen.
	instance string
	started  time.Time
	twin     *twin
	// metrics is the fleet's series, storeq the runs on their way to the
	// store (fleet.go).
	metrics *metrics.Recorder
	storeq  chan fleetstore.Run
	roster  *roster.Roster
	alerts  *alert.Alerter // nil: no --alerts
	recent  *alert.Recent  // the alerts' recent runs and waits
	waits   recentWaits
	tally   agentTally
	agentq  chan roster.Agent
	canary  *canaries      // canary.go
	verifs  *verifications // verify.go
}

// outage is why the startup scan has not succeeded yet.
type outage struct {
	since time.Time
	tries int
	err   string
}

// New checks cfg and returns a service; Start runs it.
func New(cfg Config) (*Service, error) {
	if cfg.Client == nil || cfg.Budget == nil {
		return nil, errors.New("serve: a client and a budget are required")
	}
	if cfg.Name == "" {
		cfg.Name = "kbgen"
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ReplayWindow <= 0 {
		cfg.ReplayWindow = 5 * time.Minute
	}
	if cfg.RecoverWindow <= 0 {
		cfg.RecoverWindow = time.Hour
	}
	if cfg.QueueTTL <= 0 {
		cfg.QueueTTL = DefaultQueueTTL
	}
	if cfg.OrphanGrace == 0 {
		cfg.OrphanGrace = DefaultOrphanGrace
	}
	if cfg.Heartbeat == 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.Heartbeat < 0 || cfg.Heartbeat > MaxHeartbeat {
		return nil, fmt.Errorf("serve: heartbeat %s is outside (0, %s]: a proxy's read timeout (nginx: 60 s) must not cut a quiet stream", cfg.Heartbeat, MaxHeartbeat)
	}
	if cfg.KeepDone <= 0 {
		cfg.KeepDone = 24 * time.Hour
	}
	if cfg.PollEvery <= 0 {
		// About two thirds of the budget at most for polls while no create
		// waits (one list request a poll, one more every progressEvery);
		// the watcher halves its pace while creates queue.
		cfg.PollEvery = max(time.Duration(float64(time.Minute)/(0.66*float64(cfg.Budget.Effective()))), 500*time.Millisecond)
		if cfg.WebhookSecret != "" || cfg.WebhookToken != "" {
			cfg.PollEvery = max(cfg.PollEvery, SafetyPoll)
			// Webhooks do the detecting: polls keep what the safety poll
			// spends in a window (one more every progressEvery) plus
			// webhookRoom for the polls webhooks wake and result fetches;
			// creates may have the rest. Less, and a burst of creates
			// leaves a webhook's poll waiting for the window to slide.
			safety := int(float64(Window)/float64(cfg.PollEvery)*(1+1.0/progressEvery)) + 1
			cfg.Budget.PollShare = min(cfg.Budget.PollShare, max(cfg.Budget.Effective()/5, safety+webhookRoom))
		}
	}
	s := &Service{cfg: cfg, runs: newStore(), pending: newCreateQueue(), kick: make(chan struct{}, 1), fetchq: make(chan *Run, 1<<16), ready: make(chan struct{}), keep: newKeeper(cfg),
		instance: newInstance(), started: cfg.Now()}
	if err := s.initFleet(); err != nil {
		return nil, err
	}
	s.initCanary()
	s.initVerify()
	return s, nil
}

// Start finds the service's builds on Buildkite (a restart resumes them),
// then starts the creator, the watcher and the result fetchers. They stop
// when ctx is done. Buildkite unreachable does not stop it: the scan is
// retried in the background (Health says so), runs are accepted and
// queued, and their creates wait for the scan.
func (s *Service) Start(ctx context.Context) error {
	s.ctx = ctx
	context.AfterFunc(ctx, s.keep.close)
	if err := s.recover(ctx); err != nil {
		s.setDown(err)
		s.logf("Buildkite unreachable at start (%v): serving, and looking for this service's builds again every few seconds; no build is created before", err)
		go s.recoverLoop(ctx)
	} else {
		close(s.ready)
	}
	go s.creator(ctx)
	go s.watch(ctx)
	go s.storeWriter(ctx)
	go s.runAlerts(ctx)
	go s.canaryLoop(ctx)
	for range 4 {
		go s.fetcher(ctx)
	}
	return nil
}

// recoverRetry bounds the wait between two startup scans.
const recoverRetry = 30 * time.Second

// recoverLoop repeats the startup scan until it succeeds.
func (s *Service) recoverLoop(ctx context.Context) {
	wait := time.Second
	for {
		if !sleepCtx(ctx, wait) {
			return
		}
		err := s.recover(ctx)
		if err == nil {
			s.downMu.Lock()
			d := s.down
			s.down = nil
			s.downMu.Unlock()
			s.logf("Buildkite reachable again after %s: this service's builds are found; creates start", s.cfg.Now().Sub(d.since).Round(time.Second))
			close(s.ready)
			s.wake()
			return
		}
		s.setDown(err)
		wait = min(2*wait, recoverRetry)
	}
}

func (s *Service) setDown(err error) {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	if s.down == nil {
		s.down = &outage{since: s.cfg.Now()}
	}
	s.down.tries++
	s.down.err = err.Error()
}

// Down says why the service cannot reach Buildkite since its start, or
// "" once it has.
func (s *Service) Down() string {
	s.downMu.Lock()
	defer s.downMu.Unlock()
	if s.down == nil {
		return ""
	}
	return fmt.Sprintf("Buildkite unreachable since %s (%d tries): %s; retrying, runs are queued", s.down.since.UTC().Format(time.RFC3339), s.down.tries, s.down.err)
}

// PollEvery is the watcher's interval.
func (s *Service) PollEvery() time.Duration { return s.cfg.PollEvery }

func (s *Service) logf(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, "%s kbgen serve: %s\n", s.cfg.Now().UTC().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// wake makes the watcher poll now (a webhook, a new build).
func (s *Service) wake() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}
