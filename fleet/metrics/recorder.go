package metrics

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Buckets of the histograms (classic, so any Prometheus and promtool read
// them): a queue wait runs from seconds to an hour's backlog; detection
// from a webhook's fraction of a second to a safety poll's seconds.
var (
	WaitBuckets      = []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 1800, 3600}
	DetectionBuckets = []float64{0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120}
)

// Recorder is kbgen serve's series in their own registry.
type Recorder struct {
	reg      *prometheus.Registry
	queues   *bound
	agents   *bound
	outcomes *bound
	runs     *prometheus.CounterVec
	wait     *prometheus.HistogramVec
	detect   prometheus.Histogram
	requests *prometheus.CounterVec
	limited  *prometheus.CounterVec
	webhooks *prometheus.CounterVec
	perAgent agentSeries
	info     *infoSet

	srcMu  sync.Mutex
	source func() Snapshot
}

// New returns a Recorder with every series registered.
func New() *Recorder {
	r := &Recorder{reg: prometheus.NewRegistry(), queues: newBound(MaxQueues), agents: newBound(MaxAgents), outcomes: newBound(16)}
	r.runs = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kbgen_runs_total",
		Help: "Runs done, by queue and outcome (obtained, runner_failed, infra, timed_out: kbgen submit's statuses)."}, []string{"queue", "outcome"})
	r.wait = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "kbgen_queue_wait_seconds",
		Help: "Time from a run's eval job becoming runnable to an agent starting it, by queue.", Buckets: WaitBuckets}, []string{"queue"})
	r.detect = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "kbgen_detection_latency_seconds",
		Help: "Time from a build finishing (Buildkite's finished_at) to kbgen serve seeing it.", Buckets: DetectionBuckets})
	r.requests = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kbgen_api_requests_total",
		Help: "Buildkite REST requests kbgen serve sent, by class (urgent, poll, create)."}, []string{"class"})
	r.limited = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kbgen_api_rate_limited_total",
		Help: "Buildkite REST answers 429, by the scope the answer named (rest: the organization, rest_user: the token's user, unknown)."}, []string{"scope"})
	r.webhooks = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "kbgen_webhooks_total",
		Help: "Buildkite webhooks received, by result (accepted, refused: bad signature or token, rejected: unreadable, busy: too many at once)."}, []string{"result"})
	r.perAgent = newAgentSeries()
	r.info = newInfoSet()
	r.reg.MustRegister(r.runs, r.wait, r.detect, r.requests, r.limited, r.webhooks, snapshotCollector{r}, r.info)
	r.perAgent.register(r.reg)
	return r
}

// Registry is the recorder's registry (tests gather from it).
func (r *Recorder) Registry() *prometheus.Registry { return r.reg }

// Handler serves the series in Prometheus' text format.
func (r *Recorder) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// SetSource sets what the scrape-time gauges read.
func (r *Recorder) SetSource(f func() Snapshot) {
	r.srcMu.Lock()
	defer r.srcMu.Unlock()
	r.source = f
}

func (r *Recorder) snapshot() (Snapshot, bool) {
	r.srcMu.Lock()
	f := r.source
	r.srcMu.Unlock()
	if f == nil {
		return Snapshot{}, false
	}
	return f(), true
}

// RunDone counts a run done with outcome.
func (r *Recorder) RunDone(queue, outcome string) {
	r.runs.WithLabelValues(r.queues.value(queue), r.outcomes.value(outcome)).Inc()
}

// QueueWait observes one eval job's wait for an agent.
func (r *Recorder) QueueWait(queue string, d time.Duration) {
	r.wait.WithLabelValues(r.queues.value(queue)).Observe(max(d, 0).Seconds())
}

// Detected observes how long after Buildkite's finished_at serve saw a
// build finished.
func (r *Recorder) Detected(d time.Duration) {
	r.detect.Observe(max(d, 0).Seconds())
}

// APIRequest counts one REST answer of a request of class; a 429 counts
// under the scope its body named ("" is unknown).
func (r *Recorder) APIRequest(class string, status int, scope string) {
	r.requests.WithLabelValues(class).Inc()
	if status != http.StatusTooManyRequests {
		return
	}
	switch scope {
	case "rest", "rest_user":
	default:
		scope = "unknown"
	}
	r.limited.WithLabelValues(scope).Inc()
}

// Webhook results.
const (
	WebhookAccepted = "accepted"
	WebhookRefused  = "refused"
	WebhookRejected = "rejected"
	WebhookBusy     = "busy"
)

// Webhook counts one webhook by the status serve answered.
func (r *Recorder) Webhook(status int) {
	res := WebhookRejected
	switch {
	case status < 300:
		res = WebhookAccepted
	case status == http.StatusUnauthorized:
		res = WebhookRefused
	case status == http.StatusServiceUnavailable:
		res = WebhookBusy
	}
	r.webhooks.WithLabelValues(res).Inc()
}
