package main

import (
	"cmp"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
)

// SubmitCmd runs one job as a Buildkite build and prints its FullResult.
type SubmitCmd struct {
	Queue          string `required:"" placeholder:"QUEUE" help:"Queue (or alias) of the vendor registry whose GPU agents run the job, e.g. h100 or nvidia-h100 (see kbgen vendors); an alias is sent as its queue name."`
	RunID          string `name:"run-id" placeholder:"ID" help:"Name of this run, kept in the build's env and meta-data run_id; a retried submit with the same id re-attaches instead of running twice (default: a random kbgen-… id)."`
	Image          string `placeholder:"REF" help:"Runner image override (KERNELBOT_IMAGE), e.g. ghcr.io/gpu-mode/kbgen-runner-cuda@sha256:…."`
	Priority       string `placeholder:"N" help:"Buildkite job priority for the eval step (KERNELBOT_PRIORITY), e.g. 10."`
	User           string `placeholder:"KEY" help:"Fair-share key of the submitter (KERNELBOT_USER), e.g. a Discord user id."`
	BootstrapQueue string `placeholder:"QUEUE" help:"Default: KBGEN_BOOTSTRAP_QUEUE. Queue of Kernelbot's control agents that run the bootstrap step and sign the pipeline (KERNELBOT_BOOTSTRAP_QUEUE); default: the job's own queue. See docs/security.md."`
	Branch         string `default:"main" help:"Branch of the pipeline's repository the bootstrap checks out."`
	Commit         string `default:"HEAD" help:"Commit of that branch."`
	Server         string `placeholder:"URL" help:"Submit through a kbgen serve at URL (http://127.0.0.1:PORT or unix:/path; default: $KBGEN_SERVER) instead of calling Buildkite directly; the bearer token is $KBGEN_SERVER_TOKEN. Same output and exit codes."`

	QueueCheck     `embed:""`
	JobFlags       `embed:""`
	BuildkiteFlags `embed:""`
	WaitFlags      `embed:""`
}

func (c *SubmitCmd) Run(g *Globals) error {
	sub, err := c.job(g)
	if err != nil {
		return err
	}
	if server := cmp.Or(c.Server, g.Getenv(contract.EnvServer)); server != "" {
		return c.viaServer(g, server, sub)
	}
	bk, err := c.newClient(g, true)
	if err != nil {
		return err
	}
	ctx, stop := signalContext()
	defer stop()
	p := c.progress(g)
	out := bk.Submit(ctx, *sub, c.options(bk, p))
	return reportOutcome(g, p, out)
}

// job loads the job the flags name and checks it and the queue before
// any request is made.
func (c *SubmitCmd) job(g *Globals) (*client.Submission, error) {
	in, err := c.load(g, jobsource.Options{DefaultMode: payload.ModeTest})
	if err != nil {
		return nil, err
	}
	// An unknown queue would give a build that waits forever for an agent:
	// refuse it here, and send the canonical name so builds, agents and
	// kbgen queues all agree.
	queue, err := c.resolve(g, c.Queue)
	if err != nil {
		return nil, err
	}
	runID := c.RunID
	if runID == "" {
		runID = newRunID()
	}
	return &client.Submission{
		Queue: queue, RunID: runID, Encoded: in.Encoded, Mode: in.Config.Mode,
		Image: c.Image, Priority: c.Priority, User: c.User, BootstrapQueue: cmp.Or(c.BootstrapQueue, g.Getenv(contract.EnvDefaultBootstrapQueue)), Branch: c.Branch, Commit: c.Commit,
	}, nil
}

// Help is the detailed help under the flags list.
func (c *SubmitCmd) Help() string {
	return `Creates a build on the pipeline with the job in its env (KERNELBOT_PAYLOAD,
split into KERNELBOT_PAYLOAD_0..N when large), KERNELBOT_RUN_ID and
KERNELBOT_QUEUE, waits for the eval step, and prints result.json, Kernelbot's
FullResult, as one JSON line on stdout. Nothing else goes to stdout; progress
and errors go to stderr. The token comes from $BUILDKITE_API_TOKEN or
--token-file.

Exit codes:
  0   result obtained (success true; a failed compile or test is still 0)
  2   usage error (bad flags, no token, no org or pipeline)
  3   the runner failed, or the build ended without a usable result.json:
      stdout holds a FullResult with success false and the reason in error
  4   Buildkite or storage unreachable or refusing; stdout says which, and
      'kbgen wait BUILD' or 'kbgen result BUILD' can re-attach
  5   --timeout ran out or SIGINT/SIGTERM came; the build was canceled
  65  the job is invalid (payload not decodable, schema violation)

Examples:
  export BUILDKITE_API_TOKEN=… BUILDKITE_ORG=gpu-mode BUILDKITE_PIPELINE=kernelbot
  kbgen encode --example vectoradd > job.b64
  kbgen submit --queue h100 --payload-file job.b64 > result.json
  kbgen submit --queue mi300 --task examples/vectoradd --submission examples/vectoradd/submission.py --mode benchmark
  kbgen submit --queue h100 -f - --progress=json --timeout 20m < job.b64`
}
