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

// Publish uploads the result files (paths relative to out's directory, as
// WriteResult and ResultFiles return them) as artifacts, annotates the
// build with the result's summary, and sets result.json as the build's
// meta-data payload.ResultMetaDataKey when it fits. The three agent calls
// run at once: none needs another's answer, and each is a process of its
// own whose time the job (and the GPU's next job) would otherwise wait
// out one after the other. All are tried; a failure of any is in the
// returned error and changes nothing else: the result stays on disk and
// the eval step's artifact_paths upload it again. It still runs after ctx
// is cancelled (a SIGTERM): the result is what the backend needs. notes,
// when not empty, is appended to the annotation (the noise record's line).
func Publish(ctx context.Context, agent *bkagent.Agent, out string, files []string, mode payload.Mode, res *payload.FullResult, notes string) error {
	ctx = context.WithoutCancel(ctx)
	calls := []func() error{
		func() error { return uploadResult(ctx, agent, out, files) },
		func() error { return annotateResult(ctx, agent, mode, res, notes) },
		func() error { return setResultMetaData(ctx, agent, out) },
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

func uploadResult(ctx context.Context, agent *bkagent.Agent, out string, files []string) error {
	if err := agent.ArtifactUpload(ctx, filepath.Dir(out), files); err != nil {
		return fmt.Errorf("artifact upload failed (the result stays in %s): %w", out, err)
	}
	return nil
}

func annotateResult(ctx context.Context, agent *bkagent.Agent, mode payload.Mode, res *payload.FullResult, notes string) error {
	style := "success"
	if !AllPassed(res) {
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

// setResultMetaData puts the result on the build itself when it fits, so
// kbgen serve's watcher reads it from the builds list it already polls (no
// request per build); the artifact stays the reference. Stamped with this
// job's id: a reader trusts it only while this job is the eval step's
// latest (payload/resultmeta.go).
func setResultMetaData(ctx context.Context, agent *bkagent.Agent, out string) error {
	enc, fits := resultMetaData(RunOptions{Environ: agent.Env}.getenv(contract.EnvJobID), out)
	if !fits {
		return nil
	}
	if err := agent.MetaDataSet(ctx, payload.ResultMetaDataKey, []byte(enc)); err != nil {
		return fmt.Errorf("setting meta-data %s failed: %w", payload.ResultMetaDataKey, err)
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
