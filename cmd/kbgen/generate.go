package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"

	"github.com/buildkite/go-pipeline"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/version"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/signing"
)

// GenerateCmd is the bootstrap step's command: job from the build env in,
// pipeline YAML out (or piped into buildkite-agent pipeline upload).
type GenerateCmd struct {
	Queue       string `help:"Queue (vendor) to run on. Default: KERNELBOT_QUEUE from the build env." placeholder:"QUEUE"`
	PayloadFile string `help:"Read the job from FILE (- for stdin) instead of KERNELBOT_PAYLOAD*. FILE may hold the encoded payload or the plain JSON config." placeholder:"FILE"`
	Vendors     string `help:"Vendor registry YAML replacing the built-in one. Default: KBGEN_VENDORS." placeholder:"FILE"`
	Upload      bool   `help:"Pipe the pipeline into 'buildkite-agent pipeline upload' instead of printing it."`
	Agent       string `help:"The agent CLI used by --upload." default:"${agent_cli}" hidden:""`

	SigningKey   string `help:"Sign every step with the private JWKS in FILE (from 'kbgen keygen'), so vendor nodes installed with --verification-key run only steps kbgen generated. Default: KBGEN_SIGNING_KEY." placeholder:"FILE"`
	SigningKeyID string `help:"Key id to sign with when the JWKS holds several keys (during a rotation), e.g. kernelbot-2026-11. Default: KBGEN_SIGNING_KEY_ID, or the only key." placeholder:"ID"`
	RepoURL      string `help:"Repository URL the signature binds, exactly as the agent sees it in BUILDKITE_REPO (e.g. https://github.com/gpu-mode/kbgen.git). Default: BUILDKITE_REPO." placeholder:"URL"`
	// Off by default: a v3.52.1 agent refuses every step that carries
	// Buildkite's signature, without a key (it cannot verify) or with one
	// (it drops the step's plugins before checking: fixed in v3.53.0).
	AgentSignature bool `help:"Also sign each step with Buildkite's own step signature, for a fleet whose agents (v3.53 or newer) verify it with job-verification-jwks-path. buildkite-agent v3.52.1 refuses every step that carries one. Default: KBGEN_AGENT_SIGNATURE=1."`

	key jwk.Key // loaded from SigningKey by Run
}

func (c *GenerateCmd) Help() string {
	return `Run by the bootstrap step of .buildkite/pipeline.yml on every Kernelbot build:

  kbgen generate --upload

reads KERNELBOT_PAYLOAD (or KERNELBOT_PAYLOAD_0..N), KERNELBOT_RUN_ID,
KERNELBOT_QUEUE and the optional KERNELBOT_IMAGE, KERNELBOT_PRIORITY and
KERNELBOT_USER from the build env, and emits the eval step for the queue's
vendor. Without a job in the env (an ordinary push) it emits a pipeline with
no eval step and says why on stderr, so such builds pass.

Try it locally:

  kbgen encode job.json > job.b64
  kbgen generate --queue h100 --payload-file job.b64

Signed pipelines (docs/security.md): on the control agent that holds the
signing key,

  KBGEN_SIGNING_KEY=/etc/kbgen/signing-key.json kbgen generate --upload

signs the eval step (command, plugins, env, payload, queue) with the key
(KBGEN_STEP_SIGNATURE); on a node installed with --verification-key,
kbgen sandbox refuses it (65) if any of that changed on the way. Add
--agent-signature for agents that verify Buildkite's own step signature
(v3.53 or newer; v3.52.1 refuses every step that carries one). A retried bootstrap uploads nothing twice:
the upload sets meta-data kbgen_uploaded, and a second run that finds it
stops there.

Exit codes: 0 ok, 2 bad flags or unknown queue, 65 invalid job or build
env (KERNELBOT_PRIORITY, KERNELBOT_IMAGE, multi-GPU on a one-GPU queue), 1
upload, signing or other failure.`
}

func (c *GenerateCmd) Run(g *Globals) error {
	// A bad key must fail before anything is read or uploaded, and the same
	// way whether or not the build carries a job.
	if err := c.loadSigningKey(g); err != nil {
		return err
	}
	reg, err := loadRegistry(g, c.Vendors)
	if err != nil {
		return err
	}
	p, noJob, err := pipelinegen.FromBuild(reg, pipelinegen.Build{PayloadFile: c.PayloadFile, Stdin: g.Stdin, Queue: c.Queue, Lookup: g.LookupEnv}, pipelinegen.Options{GeneratorVersion: version.Version})
	switch {
	case pipelinegen.IsUsage(err):
		return withCode(exitcode.Usage, err)
	case err != nil:
		return err
	case noJob:
		fmt.Fprintln(g.Stderr, "kbgen: no Kernelbot job in this build (no KERNELBOT_PAYLOAD): emitting a pipeline with no eval step")
	}
	return c.emit(g, p)
}

func (c *GenerateCmd) emit(g *Globals, p *pipeline.Pipeline) error {
	if err := c.sign(g, p); err != nil {
		return err
	}
	doc, err := pipelinegen.Marshal(p)
	if err != nil {
		return err
	}
	if !c.Upload {
		_, err := g.Stdout.Write(doc)
		return err
	}
	agent, err := bkagent.Find(c.Agent, g.Environ())
	if err != nil {
		return fmt.Errorf("uploading pipeline: %w (run inside a Buildkite job, or print the pipeline without --upload)", err)
	}
	ctx := context.Background()
	// A bootstrap retried after its upload (its agent lost on the way out)
	// must not upload a second eval step.
	done, err := agent.MetaDataExists(ctx, contract.MetaDataUploaded)
	if err != nil {
		return err
	}
	if done {
		fmt.Fprintf(g.Stderr, "kbgen: this build's pipeline was already uploaded (meta-data %s is set: a retried bootstrap); not uploading it again\n", contract.MetaDataUploaded)
		return nil
	}
	if err := agent.PipelineUpload(ctx, doc); err != nil {
		return err
	}
	fmt.Fprintln(g.Stderr, "kbgen: pipeline uploaded")
	if err := agent.MetaDataSet(ctx, contract.MetaDataUploaded, []byte(g.Getenv(contract.EnvJobID))); err != nil {
		// The upload stands; only a retry of this job would upload again,
		// and Buildkite refuses its duplicate step key.
		fmt.Fprintf(g.Stderr, "kbgen: warning: could not record the upload in meta-data %s: %v\n", contract.MetaDataUploaded, err)
	}
	return nil
}

// loadSigningKey resolves the signing flags and their env defaults and
// loads the key, so a missing or wrong key fails before any work.
func (c *GenerateCmd) loadSigningKey(g *Globals) error {
	c.SigningKey = cmp.Or(c.SigningKey, g.Getenv(contract.EnvSigningKey))
	if c.SigningKey == "" {
		return nil
	}
	c.SigningKeyID = cmp.Or(c.SigningKeyID, g.Getenv(contract.EnvSigningKeyID))
	c.RepoURL = cmp.Or(c.RepoURL, g.Getenv(contract.EnvRepo))
	if c.RepoURL == "" {
		return withCode(exitcode.Usage, errors.New("signing binds the repository URL: pass --repo-url or set BUILDKITE_REPO"))
	}
	key, err := signing.LoadPrivate(c.SigningKey, c.SigningKeyID)
	if err != nil {
		return err
	}
	c.key = key
	return nil
}

func (c *GenerateCmd) sign(g *Globals, p *pipeline.Pipeline) error {
	if c.key == nil {
		return nil
	}
	// The build's payload, as the eval job will see it; "" when it has
	// none in the env (a --payload-file run), as the sandbox would see it.
	sum := ""
	if encoded, err := payload.JoinEnv(g.LookupEnv); err == nil {
		sum = payload.Checksum(encoded)
	}
	if err := pipelinegen.SignEvalStep(p, c.key, sum); err != nil {
		return err
	}
	if c.AgentSignature || g.Getenv(contract.EnvAgentSignature) == "1" {
		if err := pipelinegen.Sign(context.Background(), p, c.key, c.RepoURL); err != nil {
			return err
		}
	}
	signed := 0
	for _, s := range p.Steps {
		if cs, ok := s.(*pipeline.CommandStep); ok && (cs.Signature != nil || cs.Env[contract.EnvStepSignature] != "") {
			signed++
		}
	}
	if signed > 0 {
		id, _ := c.key.KeyID()
		fmt.Fprintf(g.Stderr, "kbgen: signed %d step(s) with key %q for %s\n", signed, id, c.RepoURL)
	}
	return nil
}
