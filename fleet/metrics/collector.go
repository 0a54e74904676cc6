package metrics

import (
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The scrape-time gauges' descriptions.
var (
	jobsDesc = prometheus.NewDesc("kbgen_jobs",
		"Runs of this service not done yet, by queue and state (queued: no build yet; waiting: build, eval job not runnable; scheduled: ready for an agent, Buildkite's meaning; running: on an agent).",
		[]string{"queue", "state"}, nil)
	oldestDesc = prometheus.NewDesc("kbgen_oldest_scheduled_job_age_seconds",
		"Age of the oldest scheduled (ready for an agent) eval job of this service, by queue; 0 when none.",
		[]string{"queue"}, nil)
	agentsDesc = prometheus.NewDesc("kbgen_agents",
		"Agents by queue and state (idle, busy, paused, lost), from the cached queue view and the roster.",
		[]string{"queue", "state"}, nil)
	budgetLimitDesc = prometheus.NewDesc("kbgen_api_budget_limit",
		"REST requests kbgen serve allows itself in any 61 seconds (all tokens together).", nil, nil)
	budgetLeftDesc = prometheus.NewDesc("kbgen_api_budget_left",
		"REST requests kbgen serve may still send in the current 61 seconds by its own count.", nil, nil)
	remainingDesc = prometheus.NewDesc("kbgen_api_rate_limit_remaining",
		"Buildkite's last RateLimit-Remaining (scope rest: the organization) and RateLimit-User-Remaining (scope rest_user, per token index); absent until Buildkite said.",
		[]string{"scope", "token"}, nil)
)

// snapshotCollector turns the recorder's Snapshot into gauges at scrape.
type snapshotCollector struct{ r *Recorder }

func (c snapshotCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{jobsDesc, oldestDesc, agentsDesc, budgetLimitDesc, budgetLeftDesc, remainingDesc, canaryDriftingDesc, canaryOffFlagDesc, canaryOffsetDesc} {
		ch <- d
	}
}

func (c snapshotCollector) Collect(ch chan<- prometheus.Metric) {
	s, ok := c.r.snapshot()
	if !ok {
		return
	}
	c.jobs(ch, s.Jobs, time.Now())
	if s.AgentsKnown {
		c.agents(ch, s.Agents)
	}
	c.canaries(ch, s.Canaries)
	b := s.Budget
	ch <- prometheus.MustNewConstMetric(budgetLimitDesc, prometheus.GaugeValue, float64(b.Limit))
	ch <- prometheus.MustNewConstMetric(budgetLeftDesc, prometheus.GaugeValue, float64(max(b.Limit-b.Used, 0)))
	if b.OrgRemaining >= 0 {
		ch <- prometheus.MustNewConstMetric(remainingDesc, prometheus.GaugeValue, float64(b.OrgRemaining), "rest", "")
	}
	for i, left := range b.UserRemaining {
		if left >= 0 {
			ch <- prometheus.MustNewConstMetric(remainingDesc, prometheus.GaugeValue, float64(left), "rest_user", strconv.Itoa(i))
		}
	}
}

// jobs reports every state of every queue seen (0 too: a series that
// vanishes reads as "no data", not "none"), and the oldest scheduled age.
func (c snapshotCollector) jobs(ch chan<- prometheus.Metric, jobs []Job, now time.Time) {
	counts := map[string]map[string]int{}
	oldest := map[string]time.Duration{}
	for _, j := range jobs {
		q := c.r.queues.value(j.Queue)
		if counts[q] == nil {
			counts[q] = map[string]int{}
		}
		counts[q][j.State]++
		if j.State == JobScheduled && !j.Runnable.IsZero() {
			oldest[q] = max(oldest[q], now.Sub(j.Runnable))
		}
	}
	for q, byState := range counts {
		for _, st := range JobStates {
			ch <- prometheus.MustNewConstMetric(jobsDesc, prometheus.GaugeValue, float64(byState[st]), q, st)
		}
		ch <- prometheus.MustNewConstMetric(oldestDesc, prometheus.GaugeValue, oldest[q].Seconds(), q)
	}
}

func (c snapshotCollector) agents(ch chan<- prometheus.Metric, agents []Agent) {
	counts := map[string]map[string]int{}
	for _, a := range agents {
		q := c.r.queues.value(a.Queue)
		if counts[q] == nil {
			counts[q] = map[string]int{}
		}
		counts[q][a.State]++
	}
	for q, byState := range counts {
		for _, st := range AgentStates {
			ch <- prometheus.MustNewConstMetric(agentsDesc, prometheus.GaugeValue, float64(byState[st]), q, st)
		}
	}
}
