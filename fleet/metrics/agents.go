package metrics

import (
	"slices"
	"sync"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/prometheus/client_golang/prometheus"
)

// agentSeries are the per-agent counters, fed by each run's facts.
type agentSeries struct {
	runs, noisy, faults, xids, clock *prometheus.CounterVec
}

func newAgentSeries() agentSeries {
	c := func(name, help string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"agent", "queue"})
	}
	return agentSeries{
		runs:   c("kbgen_agent_runs_total", "Eval job attempts on this agent whose facts came back (each retry counts on its own agent)."),
		noisy:  c("kbgen_agent_noisy_runs_total", "Runs on this agent whose noise record's verdict was noisy."),
		faults: c("kbgen_agent_machine_faults_total", "Runs on this agent that exited 75 (a machine fault: Buildkite retries elsewhere)."),
		xids:   c("kbgen_agent_xids_total", "NVIDIA Xids reported on this agent's GPUs during its runs (noise records)."),
		clock:  c("kbgen_agent_clock_event_seconds_total", "Seconds this agent's GPU clocks were held down by external clock events during timed runs (noise records)."),
	}
}

func (a agentSeries) register(reg *prometheus.Registry) {
	reg.MustRegister(a.runs, a.noisy, a.faults, a.xids, a.clock)
}

// RunFacts feeds one attempt's facts to the per-agent series (its run,
// a machine fault when it exited 75, noise, Xids, clock events) and the
// agent's info series (the latest facts fed win).
func (r *Recorder) RunFacts(f runfacts.Facts) {
	f = f.Clean()
	agent, queue := r.agents.value(f.Agent), r.queues.value(f.Queue)
	a := r.perAgent
	a.runs.WithLabelValues(agent, queue).Inc()
	if f.Exit != nil && *f.Exit == exitcode.TempFail {
		a.faults.WithLabelValues(agent, queue).Inc()
	}
	if f.Noise == "noisy" {
		a.noisy.WithLabelValues(agent, queue).Inc()
	}
	a.xids.WithLabelValues(agent, queue).Add(float64(f.Xids))
	a.clock.WithLabelValues(agent, queue).Add(f.ClockEventSeconds)
	if agent != Other {
		r.info.set(agent, queue, f)
	}
}

// AgentInfo sets the agent's info series alone (no run counted): kbgen
// serve feeds each roster agent, so one known from node install's tags or
// from before a restart has its series before its next run. The latest
// fed wins.
func (r *Recorder) AgentInfo(f runfacts.Facts) {
	f = f.Clean()
	if agent := r.agents.value(f.Agent); agent != Other && f.Agent != "" {
		r.info.set(agent, r.queues.value(f.Queue), f)
	}
}

var infoDesc = prometheus.NewDesc("kbgen_agent_info",
	"1 for each GPU of each agent, from its latest run's facts (else the node and GPUs kbgen node install tagged it with); join with DCGM's or AMD's exporter on gpu_uuid (docs/operations.md).",
	[]string{"agent", "queue", "node", "gpu_uuid", "gpu_model", "driver", "kbgen_version"}, nil)

// infoSet is each agent's latest info labels, one set per GPU; an agent's
// new facts replace its old sets.
type infoSet struct {
	mu  sync.Mutex
	per map[string][][]string
}

func newInfoSet() *infoSet { return &infoSet{per: map[string][][]string{}} }

func (s *infoSet) set(agent, queue string, f runfacts.Facts) {
	uuids := f.GPUUUIDs
	if len(uuids) == 0 {
		uuids = []string{""}
	}
	var sets [][]string
	for _, u := range uuids {
		sets = append(sets, []string{agent, queue, f.Node, u, f.GPUModel, f.Driver, f.KbgenVersion})
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.per[agent] = sets
}

func (s *infoSet) Describe(ch chan<- *prometheus.Desc) { ch <- infoDesc }

func (s *infoSet) Collect(ch chan<- prometheus.Metric) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, sets := range s.per {
		for _, l := range sets {
			ch <- prometheus.MustNewConstMetric(infoDesc, prometheus.GaugeValue, 1, slices.Clone(l)...)
		}
	}
}
