package fakebuildkite

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/buildkite/go-pipeline"
)

// stepSpec is one command step as the live server schedules it: what
// go-pipeline parsed, with the fields Buildkite acts on made concrete.
type stepSpec struct {
	key, label, command string
	env                 map[string]string
	plugins             string // BUILDKITE_PLUGINS (JSON), "" for none
	queue               string
	dependsOn           []string
	afterWait           bool // a wait step came before it in its upload
	priority            int
	timeoutMinutes      int
	artifactPaths       []string
	retry               []retryRule
	signature           *pipeline.Signature
	// step is the step as uploaded (JSON, signature included): the job's
	// `step` an agent verifies (api.Job.Step, agent/verify_job.go).
	step json.RawMessage
}

// retryRule is one entry of retry.automatic, as buildkite/docs
// pages/pipelines/configure/retry.md defines it: exit_status, signal and
// signal_reason must all match; "*" (the default for each) matches any
// signal or reason but, for exit_status, only 1 to 255: not 0, and not
// the -1 of a lost agent. "none" matches a job without a signal or reason.
type retryRule struct {
	anyExit bool
	exits   []int
	signals []string // normalized (signalName); nil: "*"
	reasons []string // nil: "*"
	limit   int
}

// signalReasons are the values Buildkite documents for signal_reason
// (retry.md; the GraphQL enum JobEventSignalReason; the agent's own in
// agent/run_job.go), plus the rule-only "none".
var signalReasons = map[string]bool{
	"none": true, "cancel": true, "agent_stop": true, "agent_refused": true, "agent_incompatible": true,
	"process_run_error": true, "signature_rejected": true, "stack_error": true,
}

// maxRetryLimit is the highest limit Buildkite accepts (retry.md).
const maxRetryLimit = 10

// matches reports whether the rule covers a job that finished with exit
// status code, signal (the agent's name for it, "" for none) and signal
// reason ("" for none).
func (r retryRule) matches(code int, signal, reason string) bool {
	switch {
	case r.anyExit && (code < 1 || code > 255):
		return false
	case !r.anyExit && !slices.Contains(r.exits, code):
		return false
	case r.signals != nil && !slices.Contains(r.signals, orNone(signalName(signal))):
		return false
	case r.reasons != nil && !slices.Contains(r.reasons, orNone(reason)):
		return false
	}
	return true
}

// retryBy is the rule that retries a job, given how many retries each
// rule has spent: the first rule that matches, if it has retries left.
// Buildkite never falls through to a later rule (retry.md).
func retryBy(rules []retryRule, used []int, code int, signal, reason string) (int, bool) {
	for i, r := range rules {
		if r.matches(code, signal, reason) {
			return i, used[i] < r.limit
		}
	}
	return 0, false
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// signalName is a signal as retry rules compare it: case-insensitive,
// the SIG prefix optional (retry.md).
func signalName(s string) string {
	s = strings.ToUpper(s)
	if s == "NONE" {
		return "none"
	}
	return strings.TrimPrefix(s, "SIG")
}

// stepFields are the step fields go-pipeline leaves in RemainingFields,
// read back from its JSON form (which is plain JSON, unlike the ordered
// maps RemainingFields holds).
type stepFields struct {
	Agents         json.RawMessage `json:"agents"`
	DependsOn      json.RawMessage `json:"depends_on"`
	Priority       json.RawMessage `json:"priority"`
	TimeoutMinutes json.RawMessage `json:"timeout_in_minutes"`
	ArtifactPaths  json.RawMessage `json:"artifact_paths"`
	Retry          *struct {
		Automatic json.RawMessage `json:"automatic"`
	} `json:"retry"`
}

// interpolationEnv is the variables `${VAR}` in the pipeline's own steps
// expand to: the build's env, as an agent's pipeline upload would see it.
type interpolationEnv map[string]string

func (e interpolationEnv) Get(k string) (string, bool) { v, ok := e[k]; return v, ok }
func (e interpolationEnv) Set(k, v string)             { e[k] = v }

// parseSteps parses a pipeline (YAML or the JSON an agent uploads) into
// the steps to schedule. env, when not nil, interpolates it first (the
// pipeline's own steps; an agent's upload is interpolated already).
func parseSteps(src []byte, env map[string]string) ([]stepSpec, error) {
	p, err := pipeline.Parse(bytes.NewReader(src))
	if err != nil {
		return nil, fmt.Errorf("parsing pipeline: %w", err)
	}
	if env != nil {
		if err := p.Interpolate(interpolationEnv(env), false); err != nil {
			return nil, fmt.Errorf("interpolating pipeline: %w", err)
		}
	}
	uploaded := uploadedSteps(src)
	var out []stepSpec
	wait := false
	for i, st := range p.Steps {
		switch s := st.(type) {
		case *pipeline.WaitStep:
			wait = true
		case *pipeline.CommandStep:
			spec, err := commandSpec(s)
			if err != nil {
				return nil, err
			}
			if i < len(uploaded) {
				spec.useUploaded(uploaded[i])
			}
			spec.afterWait = wait
			for k, v := range p.Env.ToMap() {
				if _, ok := spec.env[k]; !ok {
					spec.env[k] = v
				}
			}
			out = append(out, spec)
		default:
			return nil, fmt.Errorf("step type %T is not supported by the local Buildkite", st)
		}
	}
	return out, nil
}

// uploadedSteps are the steps of an agent's upload (JSON) as the agent
// wrote them; nil for YAML (the pipeline's own steps).
func uploadedSteps(src []byte) []json.RawMessage {
	var doc struct {
		Steps []json.RawMessage `json:"steps"`
	}
	if !json.Valid(src) || json.Unmarshal(src, &doc) != nil {
		return nil
	}
	return doc.Steps
}

// useUploaded keeps the step as the agent uploaded it: the job's `step`
// and BUILDKITE_PLUGINS must be the uploading agent's own JSON, byte for
// byte, for a verifying agent to check the signature over them
// (v3.52.1 compares the job's BUILDKITE_PLUGINS with its own marshalling
// of the step's plugins: agent/verify_job.go, api/jobs.go).
func (spec *stepSpec) useUploaded(raw json.RawMessage) {
	var f struct {
		Plugins json.RawMessage `json:"plugins"`
	}
	if json.Unmarshal(raw, &f) != nil {
		return
	}
	spec.step = raw
	if len(f.Plugins) > 0 && string(f.Plugins) != "null" {
		var b bytes.Buffer
		if json.Compact(&b, f.Plugins) == nil {
			spec.plugins = b.String()
		}
	}
}

func commandSpec(s *pipeline.CommandStep) (stepSpec, error) {
	spec := stepSpec{key: s.Key, label: s.Label, command: s.Command, env: map[string]string{}, queue: "default", signature: s.Signature}
	for k, v := range s.Env {
		spec.env[k] = v
	}
	if spec.label == "" {
		spec.label = s.Command
	}
	if len(s.Plugins) > 0 {
		b, err := json.Marshal(s.Plugins)
		if err != nil {
			return spec, err
		}
		spec.plugins = string(b)
	}
	raw, err := json.Marshal(s)
	if err != nil {
		return spec, err
	}
	spec.step = raw
	var f stepFields
	if err := json.Unmarshal(raw, &f); err != nil {
		return spec, fmt.Errorf("step %q: %w", s.Key, err)
	}
	if len(f.Agents) > 0 {
		var agents map[string]any
		if err := json.Unmarshal(f.Agents, &agents); err == nil {
			if q, ok := agents["queue"].(string); ok && q != "" {
				spec.queue = q
			}
		} else {
			var list []string
			if err := json.Unmarshal(f.Agents, &list); err != nil {
				return spec, fmt.Errorf("step %q: agents: %w", s.Key, err)
			}
			for _, t := range list {
				if q, ok := strings.CutPrefix(t, "queue="); ok {
					spec.queue = q
				}
			}
		}
	}
	if spec.dependsOn, err = dependsOn(f.DependsOn); err != nil {
		return spec, fmt.Errorf("step %q: depends_on: %w", s.Key, err)
	}
	if spec.priority, err = intField(f.Priority); err != nil {
		return spec, fmt.Errorf("step %q: priority: %w", s.Key, err)
	}
	if spec.timeoutMinutes, err = intField(f.TimeoutMinutes); err != nil {
		return spec, fmt.Errorf("step %q: timeout_in_minutes: %w", s.Key, err)
	}
	if len(f.ArtifactPaths) > 0 {
		var one string
		if json.Unmarshal(f.ArtifactPaths, &one) == nil {
			spec.artifactPaths = strings.Split(one, ";")
		} else if err := json.Unmarshal(f.ArtifactPaths, &spec.artifactPaths); err != nil {
			return spec, fmt.Errorf("step %q: artifact_paths: %w", s.Key, err)
		}
	}
	if f.Retry != nil {
		if spec.retry, err = retryRules(f.Retry.Automatic); err != nil {
			return spec, fmt.Errorf("step %q: retry.automatic: %w", s.Key, err)
		}
	}
	return spec, nil
}

// intField reads a number that YAML may have left as a string.
func intField(raw json.RawMessage) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var n json.Number
	var s string
	if json.Unmarshal(raw, &s) == nil {
		n = json.Number(s)
	} else if err := json.Unmarshal(raw, &n); err != nil {
		return 0, err
	}
	i, err := strconv.Atoi(n.String())
	if err != nil {
		return 0, fmt.Errorf("%s is not an integer", n)
	}
	return i, nil
}

// dependsOn reads "key", ["a", "b"] or [{step: "a"}].
func dependsOn(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	var out []string
	for _, item := range list {
		var s string
		if json.Unmarshal(item, &s) == nil {
			out = append(out, s)
			continue
		}
		var m struct {
			Step string `json:"step"`
		}
		if err := json.Unmarshal(item, &m); err != nil || m.Step == "" {
			return nil, fmt.Errorf("entry %s names no step", item)
		}
		out = append(out, m.Step)
	}
	return out, nil
}

// retryRules reads retry.automatic: true (any exit, twice), one rule, or a
// list of rules with exit_status a number, a list of numbers or "*", and
// signal and signal_reason a string, a list or "*". What Buildkite would
// not accept (a limit over 10, an undocumented signal_reason) is an error.
func retryRules(raw json.RawMessage) ([]retryRule, error) {
	if len(raw) == 0 || string(raw) == "null" || string(raw) == "false" {
		return nil, nil
	}
	if string(raw) == "true" {
		return []retryRule{{anyExit: true, limit: 2}}, nil
	}
	var list []json.RawMessage
	if err := json.Unmarshal(raw, &list); err != nil {
		list = []json.RawMessage{raw}
	}
	var out []retryRule
	for _, item := range list {
		var r struct {
			ExitStatus   json.RawMessage `json:"exit_status"`
			Signal       json.RawMessage `json:"signal"`
			SignalReason json.RawMessage `json:"signal_reason"`
			Limit        json.RawMessage `json:"limit"`
		}
		if err := json.Unmarshal(item, &r); err != nil {
			return nil, err
		}
		rule := retryRule{limit: 2}
		if len(r.Limit) > 0 {
			n, err := intField(r.Limit)
			if err != nil {
				return nil, err
			}
			if n < 0 || n > maxRetryLimit {
				return nil, fmt.Errorf("limit %d is not between 0 and %d", n, maxRetryLimit)
			}
			rule.limit = n
		}
		var star string
		switch {
		case len(r.ExitStatus) == 0 || (json.Unmarshal(r.ExitStatus, &star) == nil && star == "*"):
			rule.anyExit = true
		default:
			var codes []int
			if err := json.Unmarshal(r.ExitStatus, &codes); err != nil {
				n, err := intField(r.ExitStatus)
				if err != nil {
					return nil, fmt.Errorf("exit_status %s: %w", r.ExitStatus, err)
				}
				codes = []int{n}
			}
			for _, c := range codes {
				if c < -1 || c > 255 {
					return nil, fmt.Errorf("exit_status %d is not -1 or between 0 and 255", c)
				}
			}
			rule.exits = codes
		}
		signals, err := stringsOrStar(r.Signal)
		if err != nil {
			return nil, fmt.Errorf("signal %s: %w", r.Signal, err)
		}
		for _, sg := range signals {
			rule.signals = append(rule.signals, signalName(sg))
		}
		if rule.reasons, err = stringsOrStar(r.SignalReason); err != nil {
			return nil, fmt.Errorf("signal_reason %s: %w", r.SignalReason, err)
		}
		for _, reason := range rule.reasons {
			if !signalReasons[reason] {
				return nil, fmt.Errorf("signal_reason %q is not one Buildkite documents", reason)
			}
		}
		out = append(out, rule)
	}
	return out, nil
}

// stringsOrStar reads a string, a list of strings, or "*" (nil: any).
func stringsOrStar(raw json.RawMessage) ([]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		if one == "*" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var list []string
	if err := json.Unmarshal(raw, &list); err != nil {
		return nil, err
	}
	if slices.Contains(list, "*") {
		return nil, nil
	}
	return list, nil
}
