package serve

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/gpu-mode/kbgen/fleet/canary"
	"github.com/gpu-mode/kbgen/fleet/metrics"
)

// The canaries' series at /metrics, read at scrape from the same
// assessments the alerts read (CanaryStatuses), so Prometheus rules and
// dashboards see the drift rule's verdict rather than recompute it.
var (
	canaryDriftingDesc = prometheus.NewDesc("kbgen_canary_drifting",
		"1 while the agent's canaries drift (robust z, floor and persistence against its own baseline), else 0; agents still baselining are absent.",
		[]string{"agent", "queue"}, nil)
	canaryOffsetDesc = prometheus.NewDesc("kbgen_canary_offset_ratio",
		"The agent's canary median against the median of the agents of its hardware fingerprint ((agent - peers) / peers; 0 with no peer).",
		[]string{"agent", "queue"}, nil)
)

type canaryCollector struct{ s *Service }

func (c canaryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- canaryDriftingDesc
	ch <- canaryOffsetDesc
}

// Collect writes at most metrics.MaxAgents agents' series: agent names
// come from the agents' hosts.
func (c canaryCollector) Collect(ch chan<- prometheus.Metric) {
	sts, known := c.s.CanaryStatuses()
	if !known {
		return
	}
	for i, st := range sts {
		if i >= metrics.MaxAgents {
			return
		}
		if st.State == canary.Baselining {
			continue
		}
		drifting := 0.0
		if st.State == canary.Drift {
			drifting = 1
		}
		ch <- prometheus.MustNewConstMetric(canaryDriftingDesc, prometheus.GaugeValue, drifting, st.Agent, st.Queue)
		ch <- prometheus.MustNewConstMetric(canaryOffsetDesc, prometheus.GaugeValue, st.Offset, st.Agent, st.Queue)
	}
}
