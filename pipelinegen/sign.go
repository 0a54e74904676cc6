package pipelinegen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/buildkite/go-pipeline"
	"github.com/buildkite/go-pipeline/signature"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// Sign signs every command step of p with key, binding repoURL (the
// pipeline's repository, BUILDKITE_REPO on the agent).
//
// The agent interpolates a pipeline when it is uploaded and stores the
// signature as it was, so a step signed in its written form would no longer
// match once `$$` became `$`. Sign therefore signs what the agent will
// store: it interpolates a copy, signs the copy's steps and moves the
// signatures onto p. A pipeline that refers to any variable is refused:
// its value would be the uploading agent's, unknown here, and a step whose
// meaning depends on the uploader's environment must not carry our
// signature.
func Sign(ctx context.Context, p *pipeline.Pipeline, key jwk.Key, repoURL string) error {
	if key == nil {
		return errors.New("signing pipeline: no key")
	}
	uploaded, err := AsUploaded(p)
	if err != nil {
		return err
	}
	if err := signature.SignSteps(ctx, uploaded.Steps, key, repoURL); err != nil {
		return fmt.Errorf("signing pipeline: %w", err)
	}
	return copySignatures(p.Steps, uploaded.Steps)
}

// AsUploaded returns a copy of p as `buildkite-agent pipeline upload` turns
// it into: interpolated, with every `$$` now `$`. It fails if p refers to a
// variable (an unescaped `$NAME`, `${NAME}`), naming it, or has a
// pipeline-level env block: kbgen never writes one, and its variables
// would reach every job's environment, where a verifying agent checks only
// the ones a signature happens to list.
func AsUploaded(p *pipeline.Pipeline) (*pipeline.Pipeline, error) {
	if p.Env != nil && p.Env.Len() > 0 {
		return nil, errors.New("pipeline has a pipeline-level env block; kbgen pipelines carry env only on their steps")
	}
	doc, err := Marshal(p)
	if err != nil {
		return nil, err
	}
	cp, err := Parse(doc)
	if err != nil {
		return nil, err
	}
	env := &refusingEnv{}
	if err := cp.Interpolate(env, false); err != nil {
		return nil, fmt.Errorf("interpolating pipeline: %w", err)
	}
	if len(env.looked) > 0 {
		return nil, &VariableRefError{Names: env.looked}
	}
	return cp, nil
}

// refusingEnv is an interpolation env that records every lookup: a
// generated pipeline must need none.
type refusingEnv struct {
	looked []string
	set    map[string]string
}

func (e *refusingEnv) Get(name string) (string, bool) {
	if v, ok := e.set[name]; ok {
		return v, true
	}
	if !slices.Contains(e.looked, name) {
		e.looked = append(e.looked, name)
	}
	return "", false
}

func (e *refusingEnv) Set(name, value string) {
	if e.set == nil {
		e.set = map[string]string{}
	}
	e.set[name] = value
}

// copySignatures walks two pipelines of the same shape and moves each
// command step's signature from src to dst.
func copySignatures(dst, src pipeline.Steps) error {
	if len(dst) != len(src) {
		return errors.New("signing pipeline: interpolation changed the number of steps")
	}
	for i := range dst {
		switch d := dst[i].(type) {
		case *pipeline.CommandStep:
			s, ok := src[i].(*pipeline.CommandStep)
			if !ok {
				return fmt.Errorf("signing pipeline: step %d changed type on interpolation", i)
			}
			d.Signature = s.Signature
		case *pipeline.GroupStep:
			s, ok := src[i].(*pipeline.GroupStep)
			if !ok {
				return fmt.Errorf("signing pipeline: step %d changed type on interpolation", i)
			}
			if err := copySignatures(d.Steps, s.Steps); err != nil {
				return err
			}
		}
	}
	return nil
}

// Verify checks p the way a vendor agent that verifies go-pipeline
// signatures (v3.53 and newer, --job-verification-jwks-path, behaviour
// block) would,
// after the upload's interpolation: every command step must carry a
// signature that verifies with one of keys for repoURL; an empty key set
// is an error, not a pass. It also checks the binding the signature
// cannot: `agents` is not a signed field, so each eval step's signed
// KERNELBOT_QUEUE must name the queue it is routed to.
func Verify(ctx context.Context, p *pipeline.Pipeline, keys jwk.Set, repoURL string) error {
	if keys == nil || keys.Len() == 0 {
		return errors.New("no verification keys")
	}
	uploaded, err := AsUploaded(p)
	if err != nil {
		return err
	}
	return verifySteps(ctx, uploaded.Steps, keys, repoURL)
}

func verifySteps(ctx context.Context, ss pipeline.Steps, keys jwk.Set, repoURL string) error {
	for _, s := range ss {
		switch s := s.(type) {
		case *pipeline.CommandStep:
			if err := signature.VerifyStep(ctx, s, keys, repoURL); err != nil {
				return fmt.Errorf("step %q: signature does not verify: %w", stepName(s), err)
			}
			if err := CheckQueueBinding(s); err != nil {
				return err
			}
		case *pipeline.GroupStep:
			if err := verifySteps(ctx, s.Steps, keys, repoURL); err != nil {
				return err
			}
		case *pipeline.UnknownStep:
			return errors.New("pipeline holds a step of unknown type, which cannot be verified")
		}
	}
	return nil
}

// CheckQueueBinding reports an error when a step that names its queue in
// its (signed) env KERNELBOT_QUEUE is routed by its (unsigned) agents.queue
// somewhere else: a re-routed step. Steps without KERNELBOT_QUEUE pass.
func CheckQueueBinding(s *pipeline.CommandStep) error {
	want, ok := s.Env[contract.EnvQueue]
	if !ok {
		return nil
	}
	got := stepQueue(s)
	if got != want {
		return &ReroutedError{Step: stepName(s), RoutedTo: got, SignedFor: want}
	}
	return nil
}

// VariableRefError is a pipeline that refers to variables ($NAME) the
// uploading agent would expand: what it means would not be what was
// signed.
type VariableRefError struct{ Names []string }

func (e *VariableRefError) Error() string {
	return fmt.Sprintf("pipeline refers to $%s, which the uploading agent would expand; only escaped $$ is allowed in a signed pipeline", strings.Join(e.Names, ", $"))
}

// ReroutedError is a step whose (unsigned) agents.queue is not the queue
// its signed KERNELBOT_QUEUE names.
type ReroutedError struct{ Step, RoutedTo, SignedFor string }

func (e *ReroutedError) Error() string {
	return fmt.Sprintf("step %q: routed to queue %q but signed for queue %q (%s)", e.Step, e.RoutedTo, e.SignedFor, contract.EnvQueue)
}

// stepQueue reads agents.queue in either of the forms Buildkite accepts:
// a map, or a list of "key=value" strings.
func stepQueue(s *pipeline.CommandStep) string {
	b, err := json.Marshal(s.RemainingFields["agents"])
	if err != nil {
		return ""
	}
	var m map[string]any
	if json.Unmarshal(b, &m) == nil {
		q, _ := m["queue"].(string)
		return q
	}
	var l []string
	if json.Unmarshal(b, &l) == nil {
		for _, kv := range l {
			if k, v, ok := strings.Cut(kv, "="); ok && k == "queue" {
				return v
			}
		}
	}
	return ""
}

func stepName(s *pipeline.CommandStep) string {
	if s.Key != "" {
		return s.Key
	}
	return s.Label
}
