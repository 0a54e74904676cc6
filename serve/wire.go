package serve

import (
	"errors"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/payload"
)

// RunRequest is the body of POST /v1/runs: the job as kbgen submit takes
// it. Queue must be the canonical queue name (kbgen vendors).
type RunRequest struct {
	RunID          string  `json:"run_id"`
	Queue          string  `json:"queue"`
	Payload        string  `json:"payload"` // base64(zlib(json)), Kernelbot's encoding
	Priority       string  `json:"priority,omitempty"`
	User           string  `json:"user,omitempty"`
	Image          string  `json:"image,omitempty"`
	BootstrapQueue string  `json:"bootstrap_queue,omitempty"`
	Branch         string  `json:"branch,omitempty"` // default main
	Commit         string  `json:"commit,omitempty"` // default HEAD
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
	// Detach: no client follows the run (no event stream, no polling), so
	// the service never cancels it as orphaned; its client fetches the
	// outcome later (GET /v1/runs/ID, or kbgen result BUILD).
	Detach bool `json:"detach,omitempty"`
	// Agent pins the run to the agent of this name (its kbgen-agent tag,
	// contract.EnvTargetAgent): canaries and re-measurements.
	Agent string `json:"agent,omitempty"`
}

// Run states the API reports.
const (
	StateQueued   = "queued"   // accepted; its build is not created yet
	StateBuilding = "building" // the build exists and has not finished
	StateDone     = "done"     // Result is final
)

// Outcome statuses, one per kbgen submit exit code (docs/formats.md).
const (
	StatusObtained     = "obtained"      // exit 0
	StatusRunnerFailed = "runner_failed" // exit 3
	StatusInfra        = "infra"         // exit 4
	StatusTimedOut     = "timed_out"     // exit 5 (timeout or canceled)
)

var statusNames = map[client.Status]string{
	client.Obtained: StatusObtained, client.RunnerFailed: StatusRunnerFailed,
	client.Infra: StatusInfra, client.TimedOut: StatusTimedOut,
}

// StatusOf maps a wire status back to the client's.
func StatusOf(name string) (client.Status, bool) {
	for s, n := range statusNames {
		if n == name {
			return s, true
		}
	}
	return client.Infra, false
}

// RunStatus is the answer of GET /v1/runs/{id} (and of POST and DELETE).
type RunStatus struct {
	RunID      string              `json:"run_id"`
	State      string              `json:"state"` // queued, building, done
	Build      int                 `json:"build,omitempty"`
	URL        string              `json:"url,omitempty"`
	BuildState string              `json:"build_state,omitempty"`
	Status     string              `json:"status,omitempty"` // when done
	Result     *payload.FullResult `json:"result,omitempty"` // when done, unless ResultGone
	// ResultGone says why a done run has no result any more (dropped
	// from the service's result budget); `kbgen result BUILD` reads it
	// from Buildkite.
	ResultGone string  `json:"result_gone,omitempty"`
	Elapsed    float64 `json:"elapsed"`
}

// ErrorBody is every error answer: {"error": "..."}.
type ErrorBody struct {
	Error string `json:"error"`
}

// validate checks a request before anything is created.
func (r *RunRequest) validate() (*payload.Config, error) {
	switch {
	case r.RunID == "" || len(r.RunID) > 200:
		return nil, errors.New("run_id is required (at most 200 characters)")
	case r.Queue == "":
		return nil, errors.New("queue is required")
	case r.Payload == "":
		return nil, errors.New("payload is required")
	case len(r.Payload) > payload.MaxEncodedBytes:
		return nil, fmt.Errorf("payload is %d bytes; the limit is %d", len(r.Payload), payload.MaxEncodedBytes)
	case r.TimeoutSeconds < 0:
		return nil, errors.New("timeout_seconds must not be negative")
	}
	for _, c := range r.RunID {
		if c < 0x21 || c > 0x7e {
			return nil, errors.New("run_id must be printable ASCII without spaces")
		}
	}
	cfg, err := payload.Decode(r.Payload)
	if err != nil {
		return nil, fmt.Errorf("payload: %w", err)
	}
	return cfg, nil
}

func (r *RunRequest) timeout() time.Duration {
	return time.Duration(r.TimeoutSeconds * float64(time.Second))
}
