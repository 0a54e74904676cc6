package pipelinegen

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/registry"
)

// BootstrapOptions configure Bootstrap, the whole of `kbgen generate`.
type BootstrapOptions struct {
	// Signing signs the pipeline (a zero Signing: unsigned).
	Signing Signing
	// Vendors is the registry file ("": the built-in one).
	Vendors string
	// Build is where the job and queue come from; Build.Lookup is the
	// build env, read for the job, the queue and the job id.
	Build   Build
	Options Options
	// Upload pipes the pipeline into `buildkite-agent pipeline upload`
	// (Agent, found on Environ's PATH) instead of writing it to Stdout.
	Upload  bool
	Agent   string
	Environ []string
	Stdout  io.Writer
	// Log receives what a bootstrap's job log should say: no job, signed,
	// uploaded or already uploaded.
	Log io.Writer
}

// Bootstrap is the bootstrap step: load the signing key (a bad key fails
// before anything is read or uploaded, whether or not the build carries a
// job), generate the build's pipeline, sign it, and print or upload it.
// Errors in what the caller gave carry exitcode.Usage.
func Bootstrap(ctx context.Context, o BootstrapOptions) error {
	o.Log = cmp.Or(o.Log, io.Discard)
	signer, err := o.Signing.Load()
	if err != nil {
		return err
	}
	reg, err := registry.Load(o.Vendors)
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	p, noJob, err := FromBuild(reg, o.Build, o.Options)
	switch {
	case exitcode.IsUsage(err):
		return exitcode.With(exitcode.Usage, err)
	case err != nil:
		return err
	case noJob:
		fmt.Fprintln(o.Log, "kbgen: no Kernelbot job in this build (no KERNELBOT_PAYLOAD): emitting a pipeline with no eval step")
	}
	if err := signer.Sign(ctx, p, o.Build.Lookup, o.Log); err != nil {
		return err
	}
	return o.emit(ctx, p)
}

func (o BootstrapOptions) emit(ctx context.Context, p *pipeline.Pipeline) error {
	doc, err := Marshal(p)
	if err != nil {
		return err
	}
	if !o.Upload {
		_, err := o.Stdout.Write(doc)
		return err
	}
	agent, err := bkagent.Find(o.Agent, o.Environ)
	if err != nil {
		// No agent CLI where the upload runs: the machine's fault (75,
		// Buildkite retries the bootstrap elsewhere), never "unexpected".
		return exitcode.With(exitcode.TempFail, fmt.Errorf("uploading pipeline: %w (run inside a Buildkite job, or print the pipeline without --upload)", err))
	}
	jobID, _ := o.Build.Lookup(contract.EnvJobID)
	return UploadOnce(ctx, agent, doc, jobID, o.Log)
}

// UploadOnce uploads doc unless this build's pipeline was uploaded
// already: a bootstrap retried after its upload (its agent lost on the
// way out) must not upload a second eval step. Build meta-data
// kbgen_uploaded (the uploading job's id) records the upload.
func UploadOnce(ctx context.Context, agent *bkagent.Agent, doc []byte, jobID string, log io.Writer) error {
	done, err := agent.MetaDataExists(ctx, contract.MetaDataUploaded)
	if err != nil {
		return err
	}
	if done {
		fmt.Fprintf(log, "kbgen: this build's pipeline was already uploaded (meta-data %s is set: a retried bootstrap); not uploading it again\n", contract.MetaDataUploaded)
		return nil
	}
	if err := agent.PipelineUpload(ctx, doc); err != nil {
		return err
	}
	fmt.Fprintln(log, "kbgen: pipeline uploaded")
	if err := agent.MetaDataSet(ctx, contract.MetaDataUploaded, []byte(jobID)); err != nil {
		// The upload stands; only a retry of this job would upload again,
		// and Buildkite refuses its duplicate step key.
		fmt.Fprintf(log, "kbgen: warning: could not record the upload in meta-data %s: %v\n", contract.MetaDataUploaded, err)
	}
	return nil
}
