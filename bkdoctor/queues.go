package bkdoctor

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	buildkite "github.com/buildkite/go-buildkite/v4"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/registry"
)

// queueChecks: the control queue and every registry queue with their
// connected agents (REST agents list, `queue=` tags: read_agents, which
// kbgen has; the clusters API would need read_clusters too), the agents
// on queues no step is routed to, and the agents' versions.
func queueChecks(agents []buildkite.Agent, err error, cfg Config) []Check {
	if err != nil {
		return []Check{apiFailure("agents", err, "the agents (read_agents)")}
	}
	byQueue := map[string][]buildkite.Agent{}
	for _, a := range agents {
		if a.ConnectedState == "" || a.ConnectedState == "connected" {
			q := client.AgentQueue(a)
			byQueue[q] = append(byQueue[q], a)
		}
	}
	checks := []Check{controlQueueCheck(byQueue[cfg.ControlQueue], cfg.ControlQueue)}
	for _, v := range cfg.Registry.Vendors {
		checks = append(checks, vendorQueueCheck(v, byQueue[v.Queue]))
	}
	checks = append(checks, strayQueueChecks(byQueue, cfg)...)
	return append(checks, versionCheck(byQueue, cfg))
}

func controlQueueCheck(agents []buildkite.Agent, queue string) Check {
	name := "queue " + queue
	if len(agents) == 0 {
		return Check{Name: name, Level: Fail, Detail: "no control agent connected: every build's bootstrap waits for one",
			Fix: "start a control agent on queue " + queue + " (docs/buildkite-setup.md#control-agents)"}
	}
	return Check{Name: name, Level: Pass, Detail: "control queue: " + census(agents)}
}

func vendorQueueCheck(v *registry.Vendor, agents []buildkite.Agent) Check {
	name := "queue " + v.Queue
	switch {
	case len(agents) == 0:
		return Check{Name: name, Level: Warn, Detail: "no agents connected: builds for this queue wait until a node joins",
			Fix: joinFix(v) + " (docs/vendor-onboarding.md), or leave the queue out of the registry (--vendors)"}
	case countIf(agents, paused) == len(agents):
		return Check{Name: name, Level: Warn, Detail: census(agents) + ": every agent is paused",
			Fix: "resume them (Agents → agent → Resume) when the node is fit again"}
	}
	return Check{Name: name, Level: Pass, Detail: census(agents)}
}

// joinFix is how agents join v's queue: node install on a vendor node,
// or, for a Kubernetes queue, agent-stack-k8s (node install refuses it).
func joinFix(v *registry.Vendor) string {
	if v.Backend == registry.BackendKubernetes {
		return "the vendor's cluster runs agent-stack-k8s with tags queue=" + v.Queue + " (deployment/k8s, docs/vendor-onboarding.md#kubernetes; kbgen node install refuses a Kubernetes queue)"
	}
	return "a vendor node runs kbgen node install --queue " + v.Queue
}

// strayQueueChecks: agents on a queue no step is routed to. An alias
// (h100) is the known trap: steps name the canonical queue
// (nvidia-h100), so its agents never get a job.
func strayQueueChecks(byQueue map[string][]buildkite.Agent, cfg Config) []Check {
	var out []Check
	for _, q := range sortedKeys(byQueue) {
		if q == cfg.ControlQueue || slices.Contains(cfg.Registry.Queues(), q) {
			continue
		}
		name, n := "queue "+q, len(byQueue[q])
		if v, err := cfg.Registry.Lookup(q); err == nil {
			out = append(out, Check{Name: name, Level: Fail,
				Detail: fmt.Sprintf("%s tagged with %s, an alias of %s: steps are routed to %s, so no job ever reaches them", agentCount(n), q, v.Queue, v.Queue),
				Fix:    fmt.Sprintf("re-tag them queue=%s: on each node, kbgen node install --queue %s (or setup-node.sh with QUEUE=%s)", v.Queue, v.Queue, v.Queue)})
			continue
		}
		out = append(out, Check{Name: name, Level: Warn,
			Detail: fmt.Sprintf("%s on a queue no kbgen step is routed to (%s)", agentCount(n), names(byQueue[q])),
			Fix:    "if they are meant for kbgen, tag them with a registry queue (kbgen vendors lists them) or " + cfg.ControlQueue})
	}
	return out
}

// versionCheck: every agent on kbgen's queues (aliases included) runs a version kbgen
// accepts (bkagent.MinVersion); the tested one is the advice.
func versionCheck(byQueue map[string][]buildkite.Agent, cfg Config) Check {
	var old []string
	n := 0
	for _, q := range sortedKeys(byQueue) {
		if _, err := cfg.Registry.Lookup(q); err != nil && q != cfg.ControlQueue {
			continue
		}
		for _, a := range byQueue[q] {
			n++
			if v, err := bkagent.ParseVersion(a.Version); err != nil || bkagent.CheckVersion(v) != nil {
				old = append(old, fmt.Sprintf("%s (%s)", a.Name, a.Version))
			}
		}
	}
	if len(old) > 0 {
		return Check{Name: "agent versions", Level: Fail,
			Detail: fmt.Sprintf("%s older than %s, which never see a cancel or a timeout: %s", agentCount(len(old)), bkagent.MinVersion, strings.Join(old, ", ")),
			Fix:    "upgrade them to buildkite-agent v" + bkagent.TestedVersion + " (deployment/setup-node.sh installs it)"}
	}
	return Check{Name: "agent versions", Level: Pass, Detail: fmt.Sprintf("%s on kbgen's queues, none older than %s", agentCount(n), bkagent.MinVersion)}
}

// census is "3 connected (1 busy, 2 idle, 0 paused)".
func census(agents []buildkite.Agent) string {
	busy := countIf(agents, func(a buildkite.Agent) bool { return a.Job != nil })
	p := countIf(agents, paused)
	return fmt.Sprintf("%d connected (%d busy, %d idle, %d paused)", len(agents), busy, len(agents)-busy-p, p)
}

func paused(a buildkite.Agent) bool { return a.Paused != nil && *a.Paused && a.Job == nil }

func countIf(agents []buildkite.Agent, f func(buildkite.Agent) bool) int {
	n := 0
	for _, a := range agents {
		if f(a) {
			n++
		}
	}
	return n
}

func names(agents []buildkite.Agent) string {
	var out []string
	for _, a := range agents {
		out = append(out, a.Name)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// agentCount is "1 agent", "2 agents".
func agentCount(n int) string {
	if n == 1 {
		return "1 agent"
	}
	return fmt.Sprintf("%d agents", n)
}
