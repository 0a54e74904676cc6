package main

import (
	"cmp"
	"context"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/version"
	"github.com/gpu-mode/kbgen/pipelinegen"
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
}

func (c *GenerateCmd) Help() string {
	return `Run by the bootstrap step on every Kernelbot build: the pipeline's settings
steps (.buildkite/pipeline-settings.yml, docs/buildkite-setup.md), on the
control agents that hold the signing key:

  kbgen generate --upload

reads KERNELBOT_PAYLOAD (or KERNELBOT_PAYLOAD_0..N), KERNELBOT_RUN_ID,
KERNELBOT_QUEUE and the optional KERNELBOT_IMAGE, KERNELBOT_PRIORITY and
KERNELBOT_USER from the build env, and emits the eval step for the queue's
vendor. Without a job in the env (an ordinary push) it emits a pipeline with
no eval step and says why on stderr, so such builds pass.

Try it locally (from the repository root):

  kbgen encode --example vectoradd > job.b64
  kbgen generate --queue h100 --payload-file job.b64

Signed pipelines (docs/security.md): kbgen node install --control sets
KBGEN_SIGNING_KEY in the control agent's environment hook, so its bootstrap
runs

  KBGEN_SIGNING_KEY=/etc/buildkite-agent/kbgen/control/signing-key.jwks kbgen generate --upload

signs the eval step (command, plugins, env, payload, queue) with the key
(KBGEN_STEP_SIGNATURE); on a node installed with --verification-key,
kbgen sandbox refuses it (65) if any of that changed on the way. Add
--agent-signature for agents that verify Buildkite's own step signature
(v3.53 or newer; v3.52.1 refuses every step that carries one). A retried bootstrap uploads nothing twice:
the upload sets meta-data kbgen_uploaded, and a second run that finds it
stops there.

Exit codes: 0 ok, 2 bad flags, unknown queue or a signing key that is not
a private JWKS, 65 invalid job or build env (KERNELBOT_PRIORITY,
KERNELBOT_IMAGE, multi-GPU on a one-GPU queue), 75 no buildkite-agent to
upload with, 1 a failed upload or other unexpected failure.`
}

func (c *GenerateCmd) Run(g *Globals) error {
	return pipelinegen.Bootstrap(context.Background(), pipelinegen.BootstrapOptions{
		Signing: pipelinegen.Signing{
			KeyFile:        cmp.Or(c.SigningKey, g.Getenv(contract.EnvSigningKey)),
			KeyID:          cmp.Or(c.SigningKeyID, g.Getenv(contract.EnvSigningKeyID)),
			RepoURL:        cmp.Or(c.RepoURL, g.Getenv(contract.EnvRepo)),
			AgentSignature: c.AgentSignature || g.Getenv(contract.EnvAgentSignature) == "1",
		},
		Vendors: cmp.Or(c.Vendors, g.Getenv(contract.EnvVendors)),
		Build:   pipelinegen.Build{PayloadFile: c.PayloadFile, Stdin: g.Stdin, Queue: c.Queue, Lookup: g.LookupEnv},
		Options: pipelinegen.Options{GeneratorVersion: version.Version},
		Upload:  c.Upload, Agent: c.Agent, Environ: g.Environ(), Stdout: g.Stdout, Log: g.Stderr,
	})
}
