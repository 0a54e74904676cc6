package canary

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/payload"
)

// RunIDPrefix starts every canary's run id: serve tells its canaries from
// the runs it was asked for by it.
const RunIDPrefix = "kbgen-canary-"

// RunID is the canary's run id for agent at now: unique per agent and
// millisecond (an agent has one canary at a time, each far longer), and
// printable as serve requires.
func RunID(agent string, now time.Time) string {
	return fmt.Sprintf("%s%s-%d", RunIDPrefix, agent, now.UnixMilli())
}

// IsCanary says whether runID is a canary's.
func IsCanary(runID string) bool { return strings.HasPrefix(runID, RunIDPrefix) }

// Target is one agent a canary can be sent to.
type Target struct {
	Agent string `json:"agent"`
	Queue string `json:"queue"`
}

// Due is the targets whose last canary started every or longer before now
// (or never), by agent name: the schedule is per agent, so a new agent
// gets its first canary at the next tick and the fleet's canaries spread
// over the interval as agents come.
func Due(targets []Target, last map[string]time.Time, every time.Duration, now time.Time) []Target {
	var out []Target
	for _, t := range targets {
		if at, ok := last[t.Agent]; !ok || now.Sub(at) >= every {
			out = append(out, t)
		}
	}
	slices.SortFunc(out, func(a, b Target) int { return strings.Compare(a.Agent, b.Agent) })
	return out
}

// NoisyVerdict is the run facts' noise verdict that makes a canary a
// re-run: the noise record blamed something outside the job.
const NoisyVerdict = "noisy"

// ErrNoFacts is a canary without run facts: no attempt said which agent
// ran it, so its score belongs to no agent.
var ErrNoFacts = errors.New("no run facts")

// PointFrom makes a finished canary's point from its result and the run
// facts of its attempts (the last attempt is the one that produced the
// result). The context is the facts' driver, image digest and kbgen
// version with the result's CPU model; the fingerprint is the GPU model
// and the CPU model.
func PointFrom(runID string, res *payload.FullResult, facts []runfacts.Facts, at time.Time) (Point, error) {
	if len(facts) == 0 {
		return Point{}, fmt.Errorf("canary %s: %w: cannot say which agent ran it", runID, ErrNoFacts)
	}
	f := facts[len(facts)-1]
	p := Point{Agent: f.Agent, RunID: runID, At: at, Noisy: f.Noise == NoisyVerdict}
	var cpu string
	if res != nil {
		cpu = runfacts.Text(res.System.CPU, 128)
	}
	p.Context = Context{Driver: f.Driver, ImageDigest: f.ImageDigest, KbgenVersion: f.KbgenVersion, CPUModel: cpu, PowerLimit: f.PowerLimit}
	p.Fingerprint = Fingerprint(f.GPUModel, cpu)
	score, err := Score(res)
	if err != nil && !p.Noisy {
		return p, fmt.Errorf("canary %s on %s: %w", runID, f.Agent, err)
	}
	p.Score = score
	return p, nil
}

// Fingerprint names a machine's hardware for the offset's peers.
func Fingerprint(gpuModel, cpuModel string) string {
	return gpuModel + " / " + cpuModel
}
