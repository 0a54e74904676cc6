package metrics

import "time"

// Job states of kbgen_jobs, in Buildkite's meaning: scheduled is ready
// for an agent (Buildkite's "scheduled"), running is on an agent
// (assigned, accepted, running, canceling, timing out). Before those,
// a run is queued (in kbgen's create queue, no build yet) or waiting (its
// build exists, its eval step is not uploaded or not runnable yet).
const (
	JobQueued    = "queued"
	JobWaiting   = "waiting"
	JobScheduled = "scheduled"
	JobRunning   = "running"
)

// JobStates are kbgen_jobs' states, each reported (0 too) for every queue.
var JobStates = []string{JobQueued, JobWaiting, JobScheduled, JobRunning}

// JobState maps a Buildkite eval job state ("" when no eval job yet) to
// kbgen_jobs' state (pages/apis/rest_api/builds.md lists job states).
func JobState(buildkite string) string {
	switch buildkite {
	case "scheduled":
		return JobScheduled
	case "assigned", "accepted", "running", "canceling", "timing_out":
		return JobRunning
	}
	return JobWaiting
}

// Agent states of kbgen_agents: connected and idle, running a job, paused
// (Buildkite's agent pause), lost (seen before, not connected now).
const (
	AgentIdle   = "idle"
	AgentBusy   = "busy"
	AgentPaused = "paused"
	AgentLost   = "lost"
)

// AgentStates are kbgen_agents' states, each reported for every queue.
var AgentStates = []string{AgentIdle, AgentBusy, AgentPaused, AgentLost}

// Snapshot is what serve knows now, read at every scrape.
type Snapshot struct {
	// Jobs are the service's runs not done yet.
	Jobs []Job
	// Agents are the agents per queue from the cached queue view, and the
	// roster's lost ones; AgentsKnown is false before the first view.
	Agents      []Agent
	AgentsKnown bool
	// Budget is the API budget now.
	Budget Budget
	// Canaries are the judged agents' canary verdicts (none while
	// canaries are off).
	Canaries []Canary
}

// Job is one run not done yet.
type Job struct {
	Queue string
	State string // one of JobStates
	// Runnable is when its eval job became ready for an agent (zero:
	// not known); for a scheduled job, the oldest one's age is a series.
	Runnable time.Time
}

// Agent is one agent's queue and state (one of AgentStates).
type Agent struct {
	Queue, State string
}

// Budget is the API budget: kbgen's own count, and what Buildkite said.
type Budget struct {
	// Limit is the requests a window kbgen allows itself; Used those sent
	// in the window now.
	Limit, Used int
	// OrgRemaining is Buildkite's RateLimit-Remaining (-1: not known),
	// UserRemaining each token's RateLimit-User-Remaining.
	OrgRemaining  int
	UserRemaining []int
}
