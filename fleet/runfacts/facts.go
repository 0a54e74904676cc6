// Package runfacts is the one definition of a run's facts: where and how a
// run ran (agent, node, GPUs, image, kbgen version, noise verdict), written
// by the hook beside the result as the build's meta-data
// contract.MetaDataFacts and read back by kbgen serve for the per-agent
// series. The agent host writes them, never the container: they are as
// trusted as the agent, and still bounded and cleaned when read, since a
// label that reaches Prometheus must not grow without bound.
package runfacts

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// KeyPrefix starts the build meta-data key of each attempt's facts,
// Key(attempt): meta-data is per build and last write wins, and a retry
// (after an exit 75) is the very attempt whose agent the fleet must
// count, so each attempt keeps its own key. The value is stamped with the
// job that wrote it, "JOB_ID:JSON", for the audit trail.
const KeyPrefix = "kbgen_facts_"

// MaxAttempts bounds the attempts read from one build: far more than any
// retry rule allows.
const MaxAttempts = 16

// Key is attempt's meta-data key (1 + BUILDKITE_RETRY_COUNT).
func Key(attempt int) string { return KeyPrefix + strconv.Itoa(attempt) }

// Version is the facts' format version.
const Version = 1

// MaxBytes bounds the encoded facts: far below Buildkite's meta-data
// value limit, so facts never cost the result its place.
const MaxBytes = 4 << 10

// Facts is one run's facts.
type Facts struct {
	Version int    `json:"version"`
	Agent   string `json:"agent"` // BUILDKITE_AGENT_NAME
	Queue   string `json:"queue"`
	Node    string `json:"node"` // the host's name
	// GPUUUIDs are the GPUs the job was given (NVIDIA GPU-… or AMD ids).
	GPUUUIDs     []string `json:"gpu_uuids,omitempty"`
	GPUModel     string   `json:"gpu_model,omitempty"`
	Driver       string   `json:"driver,omitempty"`
	ImageDigest  string   `json:"image_digest,omitempty"`
	KbgenVersion string   `json:"kbgen_version"`
	// ImagePulled is whether the node's docker had the step's image
	// (ImageDigest's reference) when the hook asked, after the run: false
	// feeds the image_not_prepulled alarm; nil where not known (no
	// docker, no answer in time, no image named).
	ImagePulled *bool `json:"image_pulled,omitempty"`
	// PowerLimit is the run's GPUs' software power limits, in their
	// order ("700 W", "700/650 W"; nvidia-smi's power.limit), "" where
	// not read (AMD, MIG, no nvidia-smi): a canary's context.
	PowerLimit string `json:"power_limit,omitempty"`
	// Noise is the noise record's verdict ("clean", "noisy"), "" when the
	// run recorded none (a test run).
	Noise        string   `json:"noise,omitempty"`
	NoiseReasons []string `json:"noise_reasons,omitempty"`
	// Attempt is the eval job's attempt, 1 + BUILDKITE_RETRY_COUNT.
	Attempt int `json:"attempt"`
	// Exit is the sandbox's exit status (75: the machine's fault); nil
	// when the hook did not say.
	Exit *int `json:"exit,omitempty"`
	// Xids are the Xids NVML reported on the run's GPUs that are the
	// machine's fault (noise.Record.FleetCounts).
	Xids int `json:"xids,omitempty"`
	// ClockEventSeconds is the time the GPUs' clocks were held down by an
	// external clock event (thermal, power brake) during the timed runs.
	ClockEventSeconds float64 `json:"clock_event_seconds,omitempty"`
}

// Limits on one field, so that no fact makes a label or a page unbounded.
const (
	maxField   = 128
	maxList    = 16
	maxReasons = 8
	maxReason  = 256
)

// Encode is the facts as meta-data: "JOB_ID:" and the JSON, cleaned, at
// most MaxBytes.
func Encode(jobID string, f Facts) (string, error) {
	if jobID == "" || strings.ContainsAny(jobID, ": \t\n") {
		return "", fmt.Errorf("run facts: job id %q cannot stamp them", jobID)
	}
	f.Version = Version
	f = f.Clean()
	b, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	if len(b) > MaxBytes {
		f.NoiseReasons = nil
		if b, err = json.Marshal(f); err != nil {
			return "", err
		}
	}
	if len(b) > MaxBytes {
		return "", fmt.Errorf("run facts: %d bytes, over %d", len(b), MaxBytes)
	}
	return jobID + ":" + string(b), nil
}

// ErrNone is a build without facts (a run published before facts, or by a
// hook that does not write them).
var ErrNone = errors.New("run facts: none")

// Decode reads facts from meta-data value v, cleaned, with the job that
// wrote them; ErrNone for "".
func Decode(v string) (Facts, string, error) {
	if v == "" {
		return Facts{}, "", ErrNone
	}
	job, s, ok := strings.Cut(v, ":")
	if !ok || job == "" {
		return Facts{}, "", errors.New("run facts: not stamped with a job")
	}
	if len(s) > MaxBytes {
		return Facts{}, "", fmt.Errorf("run facts: %d bytes, over %d", len(s), MaxBytes)
	}
	var f Facts
	if err := json.Unmarshal([]byte(s), &f); err != nil {
		return Facts{}, "", fmt.Errorf("run facts: %v", err)
	}
	if f.Version != Version {
		return Facts{}, "", fmt.Errorf("run facts: version %d, want %d", f.Version, Version)
	}
	return f.Clean(), job, nil
}

// AttemptError is an attempt's facts that could not be read (Decode's
// error); its text names the attempt's meta-data key.
type AttemptError struct {
	Attempt int
	Err     error
}

func (e *AttemptError) Error() string { return Key(e.Attempt) + ": " + e.Err.Error() }
func (e *AttemptError) Unwrap() error { return e.Err }

// Vouch says whether facts stamped by job are that job's own: meta-data
// is the build's, any job of it may set any key, and an agent host is
// trusted for its own hardware only, so the reader checks the stamp and
// the agent named against what it knows of the build (nil: they count).
type Vouch func(job string, f Facts) error

// FromMetaData is every attempt's facts a build's meta-data carries, in
// attempt order; unreadable ones, and ones vouch refuses, are skipped and
// reported in errs, each an *AttemptError.
func FromMetaData(md map[string]string, vouch Vouch) (all []Facts, errs []error) {
	for attempt := 1; attempt <= MaxAttempts; attempt++ {
		v, ok := md[Key(attempt)]
		if !ok {
			continue
		}
		f, job, err := Decode(v)
		if err == nil {
			err = vouch(job, f)
		}
		if err != nil {
			errs = append(errs, &AttemptError{Attempt: attempt, Err: err})
			continue
		}
		f.Attempt = attempt
		all = append(all, f)
	}
	return all, errs
}

// Clean bounds every field: text cut to its limit on a rune boundary,
// control characters dropped, lists cut, numbers kept non-negative.
func (f Facts) Clean() Facts {
	for _, p := range []*string{&f.Agent, &f.Queue, &f.Node, &f.GPUModel, &f.Driver, &f.ImageDigest, &f.KbgenVersion, &f.Noise, &f.PowerLimit} {
		*p = Text(*p, maxField)
	}
	f.GPUUUIDs = cleanList(f.GPUUUIDs, maxList, maxField)
	f.NoiseReasons = cleanList(f.NoiseReasons, maxReasons, maxReason)
	f.Xids = max(f.Xids, 0)
	f.Attempt = max(f.Attempt, 0)
	f.ClockEventSeconds = max(f.ClockEventSeconds, 0)
	return f
}

func cleanList(xs []string, n, each int) []string {
	if len(xs) > n {
		xs = xs[:n]
	}
	var out []string
	for _, x := range xs {
		if x = Text(x, each); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// Text is s without control characters (C0, DEL, C1), format characters
// (Unicode's Cf: bidi overrides and isolates, zero-width characters) or
// invalid UTF-8, at most n bytes. An agent host chooses these values, and
// they reach a terminal, the dashboard and Slack alerts: html/template
// escapes markup, not a right-to-left override that shows "gpu1" as
// another agent's name.
func Text(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || r == utf8.RuneError {
			return -1
		}
		return r
	}, s)
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
