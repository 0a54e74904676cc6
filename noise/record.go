package noise

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/gpu-mode/kbgen/internal/atomicfile"
	"github.com/gpu-mode/kbgen/internal/contract"
)

// Version is the noise.json format version (docs/formats.md#noisejson).
const Version = 1

// Verdict is a record's or a run's overall judgement.
type Verdict string

const (
	Clean Verdict = "clean"
	Noisy Verdict = "noisy"
)

// Status says whether a source could be read.
type Status string

const (
	OK          Status = "ok"
	Unavailable Status = "unavailable"
)

// Availability is every source's first two fields.
type Availability struct {
	Status Status `json:"status"`
	// Why a source is unavailable, or a note on what it could see.
	Why string `json:"why,omitempty"`
}

func unavailable(format string, args ...any) Availability {
	return Availability{Status: Unavailable, Why: fmt.Sprintf(format, args...)}
}

// Record is noise.json: every timed run of one job, what each source saw,
// and the verdict.
type Record struct {
	Version int     `json:"version"`
	Verdict Verdict `json:"verdict"`
	// Reasons are why the verdict is noisy; empty when clean.
	Reasons []Reason `json:"reasons"`
	// Retry is true when this run exited 75 so that Buildkite runs it
	// again elsewhere (vouched external noise, Policy.Retry, first
	// attempt).
	Retry       bool   `json:"retry"`
	RetryReason string `json:"retry_reason,omitempty"`
	// Attempt is this job's attempt, 1 + BUILDKITE_RETRY_COUNT: above 1,
	// Buildkite ran the job again after an earlier attempt exited 75 (or
	// lost its agent); each attempt's job keeps its own noise.json and
	// result.json saying why.
	Attempt int    `json:"attempt"`
	Policy  Policy `json:"policy"`
	// Runs are keyed as result.json's runs ("benchmark", "leaderboard").
	Runs map[string]*Run `json:"runs"`
	// CostMS is the time spent sampling, all runs together.
	CostMS float64 `json:"cost_ms"`
	// Host is what `kbgen sandbox` saw from the host around the whole
	// job (MergeHost); absent when the job ran without the sandbox.
	Host *HostSection `json:"host,omitempty"`
}

// Reason is one finding that makes a run noisy.
type Reason struct {
	Run    string `json:"run"`
	Source string `json:"source"`
	// External is true when the submission's own load did not cause it.
	External bool `json:"external"`
	// Vouched is true when kbgen read it where the submission can neither
	// write nor provoke it: the kernel's steal counters, or the host's
	// /proc seen by the sandbox. What the container reports about itself
	// (its GPU through nvidia-smi, processes in its pid namespace, clock
	// events it can heat the GPU into) is recorded, never vouched. Only
	// vouched external noise is retried.
	Vouched bool   `json:"vouched"`
	Message string `json:"message"`
}

// Run is one timed run's record.
type Run struct {
	Verdict    Verdict   `json:"verdict"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	DurationMS float64   `json:"duration_ms"`
	// CPUs are the CPUs the run could use (the runner's affinity).
	CPUs            string          `json:"cpus"`
	Steal           StealReport     `json:"steal"`
	Throttling      ThrottleReport  `json:"cgroup_throttling"`
	ContextSwitches CtxSwitchReport `json:"context_switches"`
	Frequency       FreqReport      `json:"cpu_frequency"`
	Foreign         ForeignReport   `json:"foreign_processes"`
	NVIDIA          NVIDIAReport    `json:"nvidia"`
	// NVIDIAPeers are the other GPUs of a multi-GPU run's set, in order,
	// each reported as NVIDIA reports the first.
	NVIDIAPeers []NVIDIAReport `json:"nvidia_peers,omitempty"`
	ROCm        ROCmReport     `json:"rocm"`
	CostMS      float64        `json:"cost_ms"`
}

// Marshal is noise.json's text: indented, HTML characters unescaped.
func Marshal(r *Record) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return nil, fmt.Errorf("encoding %s: %w", contract.NoiseFile, err)
	}
	return buf.Bytes(), nil
}

// Write writes r to path through a new temporary file and a rename
// (internal/atomicfile: nothing planted beside it can block the write).
func Write(path string, r *Record) error {
	b, err := Marshal(r)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("writing %s: %w", contract.NoiseFile, err)
	}
	if err := atomicfile.Write(path, b, 0o644); err != nil {
		return fmt.Errorf("writing %s: %w", contract.NoiseFile, err)
	}
	return nil
}

// Read reads a noise.json.
func Read(path string) (*Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var r Record
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%s is not a noise record: %w", path, err)
	}
	return &r, nil
}
