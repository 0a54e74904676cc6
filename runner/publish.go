package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// AnnotationContext is the Buildkite annotation context of kbgen's result
// summary: one per build, replaced by a later publish.
const AnnotationContext = "kbgen-result"

// Publish uploads the result files (paths relative to out's directory, as
// WriteResult and ResultFiles return them) as artifacts and annotates the
// build with the result's summary, and sets result.json as the build's
// meta-data payload.ResultMetaDataKey when it fits. All are tried; a failure of either is
// in the returned error and changes nothing else: the result stays on disk
// and the eval step's artifact_paths upload it again. It still runs after
// ctx is cancelled (a SIGTERM): the result is what the backend needs.
// notes, when not empty, is appended to the annotation (the noise
// record's line).
func Publish(ctx context.Context, agent *bkagent.Agent, out string, files []string, mode payload.Mode, res *payload.FullResult, notes string) error {
	ctx = context.WithoutCancel(ctx)
	var errs []error
	if err := agent.ArtifactUpload(ctx, filepath.Dir(out), files); err != nil {
		errs = append(errs, fmt.Errorf("artifact upload failed (the result stays in %s): %w", out, err))
	}
	style := "success"
	if !AllPassed(res) {
		style = "error"
	}
	md := Markdown(mode, res)
	if notes != "" {
		md += "\n" + notes
	}
	if err := agent.Annotate(ctx, md, style, AnnotationContext); err != nil {
		errs = append(errs, fmt.Errorf("annotate failed: %w", err))
	}
	// The result also rides on the build itself when it fits, so kbgen
	// serve's watcher reads it from the builds list it already polls (no
	// request per build); the artifact stays the reference.
	// Stamped with this job's id: a reader trusts it only while this job
	// is the eval step's latest (payload/resultmeta.go).
	if enc, fits := resultMetaData(RunOptions{Environ: agent.Env}.getenv(contract.EnvJobID), out); fits {
		if err := agent.MetaDataSet(ctx, payload.ResultMetaDataKey, []byte(enc)); err != nil {
			errs = append(errs, fmt.Errorf("setting meta-data %s failed: %w", payload.ResultMetaDataKey, err))
		}
	}
	return errors.Join(errs...)
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
