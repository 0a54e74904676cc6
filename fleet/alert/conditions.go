package alert

import (
	"fmt"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/version"
)

// The conditions' names: an alarm's condition label, the rules file's
// alert names (deployment/prometheus/kbgen-rules.yml) and the routing
// config's words.
const (
	QueueNoAgents     = "queue_no_agents"
	AgentLost         = "agent_lost"
	CanaryDrift       = "canary_drift"
	AgentNoisy        = "agent_noisy"
	AgentFaulting     = "agent_faulting"
	VersionSkew       = "version_skew"
	ImageNotPrepulled = "image_not_prepulled"
	QueueWaitHigh     = "queue_wait_high"
	BudgetExhausted   = "api_budget_exhausted"
)

// Conditions are every condition, in the order they are judged.
var Conditions = []string{QueueNoAgents, AgentLost, CanaryDrift, AgentNoisy, AgentFaulting, VersionSkew, ImageNotPrepulled, QueueWaitHigh, BudgetExhausted}

// Rules are the conditions' bounds and durations (For: how long a
// condition must hold before its alarm fires, Prometheus' "for").
type Rules struct {
	For map[string]time.Duration
	// NoisyShare is the share of an agent's runs that may be noisy, over
	// at least MinRuns runs; Faults the exits 75 an agent may have.
	NoisyShare float64
	MinRuns    int
	Faults     int
	// WaitP95 is the queue wait p95 that is not yet an alarm.
	WaitP95 time.Duration
}

// DefaultRules are the bounds kbgen ships, the same as the Prometheus
// rules' (a test keeps them in step).
func DefaultRules() Rules {
	return Rules{
		For: map[string]time.Duration{
			QueueNoAgents: 10 * time.Minute, AgentLost: 5 * time.Minute, CanaryDrift: 15 * time.Minute,
			AgentNoisy: 15 * time.Minute, AgentFaulting: 0, VersionSkew: 30 * time.Minute,
			ImageNotPrepulled: 15 * time.Minute, QueueWaitHigh: 15 * time.Minute, BudgetExhausted: 5 * time.Minute,
		},
		NoisyShare: 0.5, MinRuns: 4, Faults: 2, WaitP95: 10 * time.Minute,
	}
}

// Finding is one condition holding now for one set of labels.
type Finding struct {
	Condition string
	Labels    map[string]string
	Summary   string
}

// judge is one condition: its findings, and whether its data is known.
type judge func(Facts, Rules) ([]Finding, bool)

var judges = map[string]judge{
	QueueNoAgents: queueNoAgents, AgentLost: agentLost, CanaryDrift: canaryDrift,
	AgentNoisy: agentNoisy, AgentFaulting: agentFaulting, VersionSkew: versionSkew,
	ImageNotPrepulled: imageNotPrepulled, QueueWaitHigh: queueWaitHigh, BudgetExhausted: budgetExhausted,
}

func find(cond, summary string, labels ...string) Finding {
	l := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		l[labels[i]] = labels[i+1]
	}
	return Finding{Condition: cond, Labels: l, Summary: summary}
}

func queueNoAgents(f Facts, _ Rules) (out []Finding, _ bool) {
	for _, q := range f.Queues {
		if q.Online == 0 {
			out = append(out, find(QueueNoAgents, fmt.Sprintf("queue %s has no connected agent", q.Name), "queue", q.Name))
		}
	}
	return out, f.AgentsKnown
}

func agentLost(f Facts, _ Rules) (out []Finding, _ bool) {
	for _, a := range f.Agents {
		if a.Lost {
			out = append(out, find(AgentLost, fmt.Sprintf("agent %s of queue %s is no longer connected", a.Name, a.Queue), "queue", a.Queue, "agent", a.Name, "node", a.Node))
		}
	}
	return out, f.AgentsKnown
}

func canaryDrift(f Facts, r Rules) (out []Finding, _ bool) {
	for _, c := range f.Canaries {
		if c.Drifting || c.Off {
			out = append(out, find(CanaryDrift, fmt.Sprintf("canary on agent %s of queue %s: %s", c.Agent, c.Queue, canaryWhy(c)), "queue", c.Queue, "agent", c.Agent))
		}
	}
	return out, f.CanariesKnown
}

// canaryWhy says which verdict holds.
func canaryWhy(c Canary) string {
	var why []string
	if c.Drifting {
		why = append(why, fmt.Sprintf("drifts %+.1f%% against its baseline", 100*c.Drift))
	}
	if c.Off {
		why = append(why, fmt.Sprintf("%+.1f%% off its hardware's other agents", 100*c.Offset))
	}
	return strings.Join(why, ", ")
}

func agentNoisy(f Facts, r Rules) (out []Finding, _ bool) {
	for _, a := range f.Agents {
		if a.Runs >= r.MinRuns && float64(a.Noisy) > r.NoisyShare*float64(a.Runs) {
			out = append(out, find(AgentNoisy, fmt.Sprintf("agent %s of queue %s: %d of its last %d runs were noisy", a.Name, a.Queue, a.Noisy, a.Runs), "queue", a.Queue, "agent", a.Name, "node", a.Node))
		}
	}
	return out, f.RunsKnown
}

func agentFaulting(f Facts, r Rules) (out []Finding, _ bool) {
	for _, a := range f.Agents {
		if a.Faults >= r.Faults {
			out = append(out, find(AgentFaulting, fmt.Sprintf("agent %s of queue %s: %d machine faults (exit 75) among its last %d runs", a.Name, a.Queue, a.Faults, a.Runs), "queue", a.Queue, "agent", a.Name, "node", a.Node))
		}
	}
	return out, f.RunsKnown
}

// versionSkew is per node: every agent of a node runs the node's one
// kbgen, so one alarm a node, not one an agent.
// Versions are compared as releases (version.Release: the run facts
// carry `kbgen version`'s whole line, whose build details may differ).
func versionSkew(f Facts, _ Rules) (out []Finding, _ bool) {
	gen := version.Release(f.Generator)
	if !comparable(gen) {
		return nil, false
	}
	seen := map[string]bool{}
	for _, a := range f.Agents {
		v := version.Release(a.Kbgen)
		if !comparable(v) || v == gen || seen[a.Node] {
			continue
		}
		seen[a.Node] = true
		out = append(out, find(VersionSkew, fmt.Sprintf("node %s runs kbgen %s, the generator %s", a.Node, v, gen), "queue", a.Queue, "node", a.Node, "kbgen_version", v))
	}
	return out, f.RunsKnown
}

func comparable(v string) bool { return v != "" && v != version.Dev }

func imageNotPrepulled(f Facts, _ Rules) (out []Finding, _ bool) {
	for _, im := range f.Images {
		if !im.Pulled {
			out = append(out, find(ImageNotPrepulled, fmt.Sprintf("node %s of queue %s has not pulled %s", im.Node, im.Queue, im.Image), "queue", im.Queue, "node", im.Node, "image", im.Image))
		}
	}
	return out, f.ImagesKnown
}

func queueWaitHigh(f Facts, r Rules) (out []Finding, _ bool) {
	for _, q := range f.Queues {
		switch {
		case q.WaitKnown && q.WaitP95 > r.WaitP95:
			out = append(out, find(QueueWaitHigh, fmt.Sprintf("queue %s: p95 wait for an agent %s (bound %s)", q.Name, q.WaitP95.Round(time.Second), r.WaitP95), "queue", q.Name))
		case q.Oldest > r.WaitP95:
			out = append(out, find(QueueWaitHigh, fmt.Sprintf("queue %s: a job has waited %s for an agent so far (bound %s)", q.Name, q.Oldest.Round(time.Second), r.WaitP95), "queue", q.Name))
		}
	}
	return out, true
}

func budgetExhausted(f Facts, _ Rules) ([]Finding, bool) {
	b := f.Budget
	why := ""
	switch {
	case b.Limit > 0 && b.Used >= b.Limit:
		why = fmt.Sprintf("kbgen serve used all %d requests of its budget", b.Limit)
	case b.OrgRemaining == 0:
		why = "Buildkite says the organization has no REST requests left (RateLimit-Remaining: 0)"
	}
	for i, left := range b.UserRemaining {
		if why == "" && left == 0 {
			why = fmt.Sprintf("Buildkite says token %d's user has no REST requests left (RateLimit-User-Remaining: 0)", i)
		}
	}
	if why == "" {
		return nil, f.BudgetKnown
	}
	return []Finding{find(BudgetExhausted, "API budget exhausted: "+why)}, f.BudgetKnown
}
