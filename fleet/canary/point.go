package canary

import (
	"strings"
	"time"
)

// Context is what an agent's canary scores are only comparable within: a
// new driver, runner image, kbgen, CPU or power limit moves the score for
// a reason that is not drift, so it starts a new baseline.
type Context struct {
	Driver       string `json:"driver,omitempty"`
	ImageDigest  string `json:"image_digest,omitempty"`
	KbgenVersion string `json:"kbgen_version,omitempty"`
	CPUModel     string `json:"cpu_model,omitempty"`
	// PowerLimit is the GPU's enforced power limit as the facts report
	// it ("" until they do).
	PowerLimit string `json:"power_limit,omitempty"`
}

// Key is the context as one comparable string.
func (c Context) Key() string {
	return strings.Join([]string{c.Driver, c.ImageDigest, c.KbgenVersion, c.CPUModel, c.PowerLimit}, "\x1f")
}

// Point is one finished canary on one agent.
type Point struct {
	Agent string    `json:"agent"`
	RunID string    `json:"run_id"`
	At    time.Time `json:"at"`
	// Score is the canary's time: the geometric mean of its benchmarks'
	// means, in the harness's unit (lower is faster; Score).
	Score   float64 `json:"score"`
	Context Context `json:"context"`
	// Fingerprint names the hardware (GPU model, CPU model): agents with
	// the same one should score alike.
	Fingerprint string `json:"fingerprint"`
	// Noisy is a run whose noise record blamed something outside the
	// job: it is re-run, never scored.
	Noisy bool `json:"noisy,omitempty"`
}
