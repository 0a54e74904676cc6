package serve

import (
	"context"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/fleet/alert"
	"github.com/gpu-mode/kbgen/fleet/metrics"
)

// The service's alerting (package fleet/alert): which conditions it sees,
// evaluated every alertEvery, and the sender that delivers them.

// defaultAlertEvery is how often conditions are evaluated.
const defaultAlertEvery = 15 * time.Second

// initAlerts makes the engine when alerts are configured: its ledger is
// the store's when there is one (a restart resends what was not
// delivered), else memory's.
func (s *Service) initAlerts() error {
	if s.cfg.Alerts == nil {
		return nil
	}
	var ledger alert.Ledger = alert.NewMemoryLedger()
	if s.cfg.Store != nil {
		ledger = s.cfg.Store.AlertLedger()
	}
	e, err := alert.NewEngine(*s.cfg.Alerts, ledger)
	if err != nil {
		return err
	}
	s.alerts = e
	return nil
}

// runAlerts evaluates and delivers until ctx is done.
func (s *Service) runAlerts(ctx context.Context) {
	if s.alerts == nil {
		return
	}
	go (&alert.Sender{Engine: s.alerts, Log: s.logf}).Run(ctx)
	every := s.cfg.AlertEvery
	if every <= 0 {
		every = defaultAlertEvery
	}
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := s.alerts.Evaluate(s.conditions(s.cfg.Now()), s.cfg.Now()); err != nil {
			s.logf("%v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// conditions is what is wrong now: queues whose oldest scheduled job is
// too old, lost agents, agents with too many machine faults in an hour.
func (s *Service) conditions(now time.Time) []alert.Condition {
	rules := s.alerts.Rules()
	var out []alert.Condition
	oldest := map[string]time.Duration{}
	for _, j := range s.fleetSnapshot().Jobs {
		if j.State == metrics.JobScheduled && !j.Runnable.IsZero() {
			oldest[j.Queue] = max(oldest[j.Queue], now.Sub(j.Runnable))
		}
	}
	for q, age := range oldest {
		if age > time.Duration(rules.QueueStuck) {
			out = append(out, alert.Condition{ID: "queue_stuck/" + q, Name: "queue stuck", Queue: q,
				Summary: fmt.Sprintf("the oldest scheduled job has waited %s for an agent", age.Round(time.Second))})
		}
	}
	for _, a := range s.roster.List() {
		if a.Lost {
			out = append(out, alert.Condition{ID: "agent_lost/" + a.Name, Name: "agent lost", Queue: a.Queue, Summary: a.Name + ": " + a.LostWhy})
		}
		if n := s.tally.faultsSince(a.Name, now.Add(-time.Hour)); n >= rules.FaultsPerHour {
			out = append(out, alert.Condition{ID: "agent_faults/" + a.Name, Name: "agent machine faults", Queue: a.Queue,
				Summary: fmt.Sprintf("%s exited 75 %d times in the last hour: quarantine it?", a.Name, n)})
		}
	}
	return out
}
