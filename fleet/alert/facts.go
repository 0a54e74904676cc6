package alert

import "time"

// Facts is one snapshot of what serve knows, the evaluator's only input.
// A source that is not wired leaves its Known flag false: its conditions
// then neither fire nor resolve (an unknown is not an all-clear).
type Facts struct {
	// Queues are the registry's queues and any the queue view shows.
	Queues []Queue
	// AgentsKnown: the queue view has been read at least once.
	AgentsKnown bool
	// Agents are the agents seen, with their recent runs.
	Agents []Agent
	// RunsKnown: the agents' run counts are fed (run facts).
	RunsKnown bool
	// Generator is the kbgen version of the generator (serve's own, which
	// releases ship with the control agents'); "" or "dev": not compared.
	Generator string
	// Budget is the API budget now; BudgetKnown false before serve has one.
	Budget      Budget
	BudgetKnown bool
	// Canaries are the latest canary measurements (Options.Canaries, a
	// CanarySource); CanariesKnown false while none is wired.
	Canaries      []Canary
	CanariesKnown bool
	// Images are the pinned images per node and whether each is pulled,
	// the latest run facts' ImagePulled per (node, queue); ImagesKnown
	// false until a run reported one.
	Images      []Image
	ImagesKnown bool
}

// Queue is one queue's agents and wait.
type Queue struct {
	Name string
	// Online counts the agents that can take its jobs: connected, not
	// paused.
	Online int
	// WaitP95 is the 95th percentile of its eval jobs' waits for an agent
	// over the recent window; WaitKnown false when no job started in it.
	WaitP95   time.Duration
	WaitKnown bool
	// Oldest is the oldest job still waiting for an agent, so far: a
	// queue whose jobs never start has no waits to take a p95 of.
	Oldest time.Duration
}

// Agent is one agent, its kbgen and its recent runs.
type Agent struct {
	Name, Queue, Node string
	// Lost: seen connected before, not connected now.
	Lost bool
	// Kbgen is the kbgen version its latest run's facts carried.
	Kbgen string
	// Runs, Noisy and Faults count its runs in the recent window: all,
	// those whose noise verdict was noisy, those that exited 75.
	Runs, Noisy, Faults int
}

// Budget is the API budget: kbgen's own count, and Buildkite's.
type Budget struct {
	Limit, Used int
	// OrgRemaining is Buildkite's RateLimit-Remaining (-1: not known),
	// UserRemaining each token's RateLimit-User-Remaining (-1: not known).
	OrgRemaining  int
	UserRemaining []int
}

// Canary is the canary rule's verdict on an agent (fleet/canary): Drifting
// while its canaries drift against its own baseline, Off while its
// median is at least the canary floor away from its fingerprint's peers.
// Drift (the last canary's change while drifting) and Offset (against
// the peers; 0.05 is 5 %) are for the message only: the alarm follows the
// verdicts, so it never disagrees with the canary rule, the dashboard or
// kbgen_canary_drifting.
type Canary struct {
	Queue, Agent  string
	Drifting, Off bool
	Drift, Offset float64
}

// Image is a pinned image on a node, and whether the node has it.
type Image struct {
	Node, Queue, Image string
	Pulled             bool
}
