package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// AnnotationContext is the Buildkite annotation context of kbgen's result
// summary: one per build, replaced by a later publish.
const AnnotationContext = "kbgen-result"

// Publish sends a result to Buildkite: result.json as the build's
// meta-data payload.ResultMetaDataKey when it fits (stamped with this job;
// kbgen serve and kbgen submit read it from the build: client.MetaDataResult),
// an annotation with the result's summary, and as artifacts only the files
// that need one (Uploads). files are paths relative to out's directory, as
// resultfile.Write and resultfile.List return them. The calls run at once: none
// needs another's answer, and each is an agent process of its own whose
// time the job (and the GPU's next job) would otherwise wait out one after
// the other. All are tried; a failure of any is in the returned error and
// changes nothing else: the result stays on disk and the plugin hook puts
// it where the eval step's artifact_paths upload it. It still runs after
// ctx is cancelled (a SIGTERM): the result is what the backend needs.
// notes, when not empty, is appended to the annotation (the noise
// record's line).
func Publish(ctx context.Context, agent *bkagent.Agent, out string, files []string, mode payload.Mode, res *payload.FullResult, notes string) error {
	ctx = context.WithoutCancel(ctx)
	meta, fits := resultMetaData(RunOptions{Environ: agent.Env}.getenv(contract.EnvJobID), out)
	calls := []func() error{
		func() error { return annotateResult(ctx, agent, mode, res, notes) },
	}
	if fits {
		calls = append(calls, func() error { return setResultMetaData(ctx, agent, meta) })
	}
	if up := Uploads(filepath.Base(out), files, fits); len(up) > 0 {
		calls = append(calls, func() error { return uploadResult(ctx, agent, out, up) })
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Uploads is which of a result's files go up as artifacts: all of them
// when result.json (named result) does not ride on the build's meta-data;
// else the others only: noise.json (each attempt's own record, kept with
// its job: the audit trail of a timed run) and profile_data/*.zip (a
// profile's download_url). So a test run, which records no noise, uploads
// nothing: buildkite-agent v3.50 to v3.52's uploader sleeps a second in
// its state loop before it reports any upload finished
// (agent/artifact_uploader.go), the largest part of a job's overhead
// (issue 18; docs/performance.md).
func Uploads(result string, files []string, onMetaData bool) []string {
	if !onMetaData {
		return files
	}
	var up []string
	for _, f := range files {
		if f != result {
			up = append(up, f)
		}
	}
	return up
}

func uploadResult(ctx context.Context, agent *bkagent.Agent, out string, files []string) error {
	if err := agent.ArtifactUpload(ctx, filepath.Dir(out), files); err != nil {
		return fmt.Errorf("artifact upload failed (the result stays in %s): %w", out, err)
	}
	return nil
}

func annotateResult(ctx context.Context, agent *bkagent.Agent, mode payload.Mode, res *payload.FullResult, notes string) error {
	style := "success"
	if !res.AllPassed() {
		style = "error"
	}
	md := Markdown(mode, res)
	if notes != "" {
		md += "\n" + notes
	}
	if err := agent.Annotate(ctx, md, style, AnnotationContext); err != nil {
		return fmt.Errorf("annotate failed: %w", err)
	}
	return nil
}

// setResultMetaData puts the result on the build itself (meta, from
// resultMetaData), so kbgen serve's watcher reads it from the builds list
// it already polls and kbgen submit from the build it waited for: no
// request per build. Stamped with this job's id: a reader trusts it only
// while this job is the eval step's latest (payload/resultmeta.go).
func setResultMetaData(ctx context.Context, agent *bkagent.Agent, meta string) error {
	if err := agent.MetaDataSet(ctx, payload.ResultMetaDataKey, []byte(meta)); err != nil {
		return fmt.Errorf("setting meta-data %s failed (the result stays in the job directory for artifact_paths): %w", payload.ResultMetaDataKey, err)
	}
	return nil
}

// resultMetaData is the file at out as the meta-data value, streamed:
// the host never holds the file whole (issue 20: 1.8 GB for a 266 MB
// result.json).
func resultMetaData(jobID, out string) (string, bool) {
	f, err := os.Open(out)
	if err != nil {
		return "", false
	}
	defer f.Close()
	enc, fits, err := payload.EncodeResultMetaDataFrom(jobID, f)
	return enc, fits && err == nil
}
