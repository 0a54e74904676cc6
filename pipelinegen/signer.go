package pipelinegen

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/buildkite/go-pipeline"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/signing"
)

// Signing is how the bootstrap signs: the private JWKS file (""
// unsigned), the key id when it holds several, the repository URL the
// agent's signature binds, and whether to add Buildkite's own step
// signature besides kbgen's (agents v3.53 or newer verify it; v3.52.1
// refuses every step carrying one).
type Signing struct {
	KeyFile, KeyID, RepoURL string
	AgentSignature          bool
}

// Signer holds a loaded key; a nil Signer signs nothing.
type Signer struct {
	key  jwk.Key
	repo string
	// agentSignature: also Buildkite's signature (Sign).
	agentSignature bool
}

// Load loads the key, so that a missing or wrong key fails before any
// work; nil when no key file is named.
func (s Signing) Load() (*Signer, error) {
	if s.KeyFile == "" {
		return nil, nil
	}
	if s.RepoURL == "" {
		return nil, exitcode.With(exitcode.Usage, errors.New("signing binds the repository URL: pass --repo-url or set BUILDKITE_REPO"))
	}
	key, err := signing.LoadPrivate(s.KeyFile, s.KeyID)
	if err != nil {
		// A key file that is missing, public or not a JWKS is the
		// caller's input (2), not an unexpected error.
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return &Signer{key: key, repo: s.RepoURL, agentSignature: s.AgentSignature}, nil
}

// Sign signs p's eval step with kbgen's step signature over the build's
// payload as the eval job will see it (lookup: the build env; no payload
// there, as in a --payload-file run, is what the sandbox will see too),
// then, when asked, every step with Buildkite's signature, and says on
// log how many steps it signed.
func (s *Signer) Sign(ctx context.Context, p *pipeline.Pipeline, lookup contract.Lookup, log io.Writer) error {
	if s == nil {
		return nil
	}
	sum := ""
	if encoded, err := payload.JoinEnv(lookup); err == nil {
		sum = payload.Checksum(encoded)
	}
	if err := SignEvalStep(p, s.key, sum); err != nil {
		return err
	}
	if s.agentSignature {
		if err := Sign(ctx, p, s.key, s.repo); err != nil {
			return err
		}
	}
	if n := signedSteps(p); n > 0 {
		id, _ := s.key.KeyID()
		fmt.Fprintf(log, "kbgen: signed %d step(s) with key %q for %s\n", n, id, s.repo)
	}
	return nil
}

// signedSteps counts the command steps carrying either signature.
func signedSteps(p *pipeline.Pipeline) int {
	n := 0
	for _, s := range p.Steps {
		if cs, ok := s.(*pipeline.CommandStep); ok && (cs.Signature != nil || cs.Env[contract.EnvStepSignature] != "") {
			n++
		}
	}
	return n
}
