package steps

import "github.com/gpu-mode/kbgen/internal/exitcode"

// RetryLimit bounds automatic retries of an infrastructure failure, so a
// broken node cannot loop a job forever.
const RetryLimit = 2

// SignalReasonNone is Buildkite's `signal_reason: none`: it matches a job
// that finished with no signal reason, i.e. the agent neither refused it,
// nor rejected its signature, nor stopped or cancelled it (buildkite/docs
// pages/pipelines/configure/retry.md, "Automatic retry attributes"). A job
// whose agent Buildkite lost ends -1 with no signal reason; the agent
// reports -1 itself only with one (agent/run_job.go: signature_rejected,
// agent_refused, process_run_error).
const SignalReasonNone = "none"

// AutomaticRetry is one rule of a step's `retry.automatic` list. Buildkite
// applies the first rule whose conditions all match, and only that one;
// a job no rule matches is not retried (retry.md).
type AutomaticRetry struct {
	ExitStatus   int    `yaml:"exit_status" json:"exit_status"`
	SignalReason string `yaml:"signal_reason,omitempty" json:"signal_reason,omitempty"`
	Limit        int    `yaml:"limit" json:"limit"`
}

// Retry is a step's `retry` block.
type Retry struct {
	Automatic []AutomaticRetry `yaml:"automatic" json:"automatic"`
	Manual    ManualRetry      `yaml:"manual" json:"manual"`
}

// ManualRetry controls the Retry button in the Buildkite UI.
type ManualRetry struct {
	Allowed        bool   `yaml:"allowed" json:"allowed"`
	PermitOnPassed bool   `yaml:"permit_on_passed" json:"permit_on_passed"`
	Reason         string `yaml:"reason,omitempty" json:"reason,omitempty"`
}

// InfraRetry retries what is the infrastructure's fault
// (exitcode.InfraRetryCodes; the bootstrap step in .buildkite/pipeline.yml
// retries the same) and nothing else.
// Every rule also requires `signal_reason: none`, because the same exit
// statuses come with a reason when the job was stopped on purpose or
// never ran: a timed-out job is cancelled (`cancel`; a 75 or 255 from the
// sandbox being stopped must not hold a GPU three times its timeout), and
// -1 also ends a job whose signature the agent rejected, that a
// pre-bootstrap hook refused, or that could not start (`signature_rejected`,
// `agent_refused`, `process_run_error`, `agent_incompatible`,
// `stack_error`): running those again changes nothing. A compile error,
// failed test or user timeout exits 0 with the failure inside
// result.json, so it is never retried. A passed job is not re-run by hand:
// a second result for the same run would be ambiguous.
func InfraRetry() Retry {
	r := Retry{Manual: ManualRetry{Allowed: true, PermitOnPassed: false, Reason: "a passed evaluation is final; submit again instead"}}
	for _, c := range exitcode.InfraRetryCodes {
		r.Automatic = append(r.Automatic, AutomaticRetry{ExitStatus: c, SignalReason: SignalReasonNone, Limit: RetryLimit})
	}
	return r
}
