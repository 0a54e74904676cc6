package serve

import (
	"context"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/canary"
	"github.com/gpu-mode/kbgen/fleet/dashboard"
	"github.com/gpu-mode/kbgen/fleet/metrics"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/version"
	"github.com/gpu-mode/kbgen/registry"
)

// The service's alerting (package fleet/alert judges and delivers): the
// run facts and queue waits that feed the metrics feed the alerts'
// Recent (a line per hook in fleet.go), AlertFacts reads the roster, the
// cached queue view and the budget the scrape-time gauges read, and the
// dashboard shows the open alarms.

// defaultAlertEvery is how often the alerts judge the fleet.
const defaultAlertEvery = 15 * time.Second

// initAlerts makes the alerter when alerts are configured. Its ledger is
// the store's (a restart resends what was not delivered and does not
// fire a firing alarm again); with no store (--store off) it is in
// memory, and the log says what a restart then loses.
func (s *Service) initAlerts() error {
	s.recent = alert.NewRecent()
	if s.cfg.Alerts == nil {
		return nil
	}
	var ledger alert.Ledger = alert.NewMemoryLedger()
	where := "in memory (no store: a restart forgets undelivered messages and fires firing alarms again)"
	if s.cfg.Store != nil {
		ledger, where = s.cfg.Store.AlertLedger(), "in the store"
	}
	a, err := alert.New(alert.Options{Config: *s.cfg.Alerts, Rules: alert.DefaultRules(), VendorOf: VendorOf(s.cfg.Registry),
		Ledger: ledger, Logf: s.logf, Canaries: s.canarySource()})
	if err != nil {
		return err
	}
	s.alerts = a
	s.logf("alerts: %d receivers, %d routes, ledger %s, %d pending", len(s.cfg.Alerts.Receivers), len(s.cfg.Alerts.Routes), where, len(a.Pending()))
	return nil
}

// canarySource is Config.Canaries, else, with canaries on
// (--canary-every), the canaries' own verdicts (CanaryStatuses): the
// alerts then judge what the canary scheduler judged, not a copy.
func (s *Service) canarySource() alert.CanarySource {
	if s.cfg.Canaries != nil || s.cfg.Canary.Every <= 0 {
		return s.cfg.Canaries
	}
	return canaryAlerts{s}
}

// canaryAlerts is the canaries as the alerts' CanarySource.
type canaryAlerts struct{ s *Service }

// Canaries is every judged agent's verdicts as the canary rule gave them
// (drifting; off its peers by at least --canary-offset-floor) with the drift
// (the last canary's change while drifting, else 0) and offset for the
// message; known once the canaries are on.
func (c canaryAlerts) Canaries(time.Time) ([]alert.Canary, bool) {
	sts, known := c.s.CanaryStatuses()
	out := make([]alert.Canary, 0, len(sts))
	for _, st := range sts {
		out = append(out, alert.Canary{Queue: st.Queue, Agent: st.Agent, Drifting: st.State == canary.Drift, Off: st.Off, Drift: st.Drift, Offset: st.Offset})
	}
	return out, known
}

// runAlerts judges and delivers until ctx is done.
func (s *Service) runAlerts(ctx context.Context) {
	if s.alerts == nil {
		return
	}
	every := s.cfg.AlertEvery
	if every <= 0 {
		every = defaultAlertEvery
	}
	s.alerts.Run(ctx, every, s.cfg.Now, s.AlertFacts)
}

func (s *Service) alertRun(f runfacts.Facts) { s.recent.Run(s.cfg.Now(), f) }

func (s *Service) alertWait(queue string, d time.Duration) { s.recent.Wait(s.cfg.Now(), queue, d) }

// AlertFacts is what the alerts judge now: the registry's queues and the
// cached view's, the roster's agents (lost ones from webhooks and the
// agent list), each queue's oldest scheduled job, the recent runs and
// waits, each node's latest report of its queue's image (the run facts'
// ImagePulled, kept by alert.Recent), kbgen's own version as the
// generator's, and the API budget.
func (s *Service) AlertFacts() alert.Facts {
	now := s.cfg.Now()
	v := alert.View{Agents: s.roster.List(), Oldest: map[string]time.Duration{}}
	if s.cfg.Registry != nil {
		v.Queues = s.cfg.Registry.Queues()
	}
	qs, known := s.queueCached()
	v.Known = known
	for _, q := range qs {
		v.Queues = append(v.Queues, q.Queue)
	}
	snap := s.fleetSnapshot()
	for _, j := range snap.Jobs {
		if j.State == metrics.JobScheduled && !j.Runnable.IsZero() {
			v.Oldest[j.Queue] = max(v.Oldest[j.Queue], now.Sub(j.Runnable))
		}
	}
	f := s.recent.Facts(now, v)
	f.Generator = version.String()
	b := snap.Budget
	f.Budget = alert.Budget{Limit: b.Limit, Used: b.Used, OrgRemaining: b.OrgRemaining, UserRemaining: b.UserRemaining}
	f.BudgetKnown = true
	return f
}

// openAlerts is the alarms firing that scope may see: its queues'; those
// of no queue (the API budget) to the whole fleet's scope only.
func (s *Service) openAlerts(scope dashboard.Scope) []dashboard.Alert {
	var out []dashboard.Alert
	for _, a := range s.alerts.Open() {
		q := a.Labels["queue"]
		if (q == "" && !scope.All()) || !scope.Sees(q) {
			continue
		}
		out = append(out, dashboard.Alert{ID: a.ID, Name: a.Condition, Severity: "firing", Summary: a.Summary, Since: a.Since})
	}
	return out
}

// VendorOf is a queue's vendor for routing alerts: the registry's donor
// for the queue (or alias); "" for a queue it does not have.
func VendorOf(reg *registry.Registry) func(string) string {
	return func(queue string) string {
		if reg == nil {
			return ""
		}
		v, err := reg.Lookup(queue)
		if err != nil {
			return ""
		}
		return v.Donor
	}
}
