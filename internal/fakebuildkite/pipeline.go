package fakebuildkite

import (
	"bytes"
	"encoding/json"
	"fmt"
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
}

// retryRule is one entry of retry.automatic.
type retryRule struct {
	anyExit bool
	exits   []int
	limit   int
}

// matches reports whether the rule covers exit status code.
func (r retryRule) matches(code int) bool {
	if r.anyExit {
		return true
	}
	for _, e := range r.exits {
		if e == code {
			return true
		}
	}
	return false
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
	var out []stepSpec
	wait := false
	for _, st := range p.Steps {
		switch s := st.(type) {
		case *pipeline.WaitStep:
			wait = true
		case *pipeline.CommandStep:
			spec, err := commandSpec(s)
			if err != nil {
				return nil, err
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
// list of rules with exit_status a number, a list of numbers or "*".
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
			ExitStatus json.RawMessage `json:"exit_status"`
			Limit      json.RawMessage `json:"limit"`
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
			rule.exits = codes
		}
		out = append(out, rule)
	}
	return out, nil
}
