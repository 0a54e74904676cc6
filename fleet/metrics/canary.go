package metrics

import "github.com/prometheus/client_golang/prometheus"

// The canaries' series (serve/canary.go, --canary-every), read at scrape
// from the same verdicts the alerts read, so Prometheus rules and
// dashboards see the drift rule's verdict rather than recompute it.
var (
	canaryDriftingDesc = prometheus.NewDesc("kbgen_canary_drifting",
		"1 while the agent's canaries drift (robust z, floor and persistence against its own baseline), else 0; agents still baselining are absent.",
		[]string{"agent", "queue"}, nil)
	canaryOffFlagDesc = prometheus.NewDesc("kbgen_canary_offset_flagged",
		"1 while the agent's canary median is at least --canary-offset-floor away from the median of the agents of its hardware fingerprint (the canary rule's offset verdict), else 0; agents still baselining are absent.",
		[]string{"agent", "queue"}, nil)
	canaryOffsetDesc = prometheus.NewDesc("kbgen_canary_offset_ratio",
		"The agent's canary median against the median of the agents of its hardware fingerprint ((agent - peers) / peers; 0 with no peer).",
		[]string{"agent", "queue"}, nil)
)

// Canary is one judged agent's canary verdict (baselining agents are
// left out of the snapshot).
type Canary struct {
	Agent, Queue string
	Drifting     bool
	// Off is the offset verdict (fleet/canary's Offset.Off).
	Off    bool
	Offset float64
}

// canaries writes each agent's three series; agent and queue names come
// from the agents' hosts, so both labels are bounded, and an agent past
// the cap is left out (summing drift flags into "other" would say nothing).
func (c snapshotCollector) canaries(ch chan<- prometheus.Metric, cs []Canary) {
	for _, cn := range cs {
		agent, queue := c.r.agents.value(cn.Agent), c.r.queues.value(cn.Queue)
		if agent == Other {
			continue
		}
		ch <- prometheus.MustNewConstMetric(canaryDriftingDesc, prometheus.GaugeValue, flag(cn.Drifting), agent, queue)
		ch <- prometheus.MustNewConstMetric(canaryOffFlagDesc, prometheus.GaugeValue, flag(cn.Off), agent, queue)
		ch <- prometheus.MustNewConstMetric(canaryOffsetDesc, prometheus.GaugeValue, cn.Offset, agent, queue)
	}
}

func flag(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
