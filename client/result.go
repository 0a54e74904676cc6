package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// Result turns a finished build into Kernelbot's FullResult: the result
// the build carries as meta-data when it is the latest eval job's
// (MetaDataResult: no further request), else that job's result.json
// artifact. A build that ended without a usable result gives
// success:false with an error that says why (failed, canceled, eval job
// never started, no artifact, invalid JSON). Only a failure to talk to
// Buildkite is returned as an error: then nothing is known about the
// result.
func (c *Client) Result(ctx context.Context, b *Build) (*payload.FullResult, error) {
	if !b.Finished() {
		return nil, fmt.Errorf("build %d has not finished (state %s)", b.Number, b.State)
	}
	eval := b.EvalJob()
	if res, err := MetaDataResult(b); err == nil {
		return c.linkProfiles(ctx, b, eval, res)
	}
	var as []Artifact
	var err error
	switch {
	case eval != nil && eval.Started():
		as, err = c.ListArtifacts(ctx, b.Number, eval.ID)
	case eval == nil && b.State != StateCanceled:
		// Old or hand-written pipelines may not key the step "eval":
		// look for result.json anywhere in the build.
		as, err = c.ListArtifacts(ctx, b.Number, "")
	}
	if err != nil {
		return nil, err
	}
	art := FindResult(as)
	if art == nil {
		return failed(missingReason(b, eval)), nil
	}
	data, err := c.Download(ctx, art, MaxResultBytes)
	if err != nil {
		return nil, err
	}
	res, perr := ParseResult(data)
	if perr != nil {
		return failed(fmt.Sprintf("build %d: %s of the eval job is not a valid FullResult: %v", b.Number, contract.ResultFile, perr)), nil
	}
	LinkProfiles(res, as)
	return res, nil
}

// linkProfiles points a meta-data result's profiles at the eval job's
// profile artifacts; a result without a profile needs no request.
func (c *Client) linkProfiles(ctx context.Context, b *Build, eval *Job, res *payload.FullResult) (*payload.FullResult, error) {
	if !HasProfile(res) {
		return res, nil
	}
	as, err := c.ListArtifacts(ctx, b.Number, eval.ID)
	if err != nil {
		return nil, err
	}
	LinkProfiles(res, as)
	return res, nil
}

// ParseResult decodes result.json strictly enough to catch a truncated or
// foreign file: it must be one JSON object with a boolean success.
func ParseResult(data []byte) (*payload.FullResult, error) {
	var probe map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&probe); err != nil {
		return nil, fmt.Errorf("not JSON (%v)", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("trailing data after the JSON object")
	}
	s, ok := probe["success"]
	if !ok || (string(s) != "true" && string(s) != "false") {
		return nil, fmt.Errorf(`no boolean "success"`)
	}
	var res payload.FullResult
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, err
	}
	if res.Runs == nil {
		res.Runs = map[string]payload.EvalResult{}
	}
	return &res, nil
}

// missingReason says why a finished build has no result.json.
func missingReason(b *Build, eval *Job) string {
	prefix := fmt.Sprintf("build %d %s", b.Number, b.State)
	if b.State == StateCanceled {
		prefix = fmt.Sprintf("build %d was canceled", b.Number)
	}
	switch {
	case eval == nil:
		boot := "the bootstrap job did not run"
		for _, j := range b.Jobs {
			if j.StepKey == contract.BootstrapStepKey || (j.Type == "script" && j.StepKey == "") {
				boot = "the bootstrap job ended " + j.State + exitText(j.ExitStatus)
				break
			}
		}
		return fmt.Sprintf("%s before the eval step was uploaded (%s); no %s", prefix, boot, contract.ResultFile)
	case !eval.Started():
		return fmt.Sprintf("%s: the eval job never started (state %s): no agent on queue %q took it; no %s", prefix, eval.State, b.Queue(), contract.ResultFile)
	case eval.State != StatePassed:
		return fmt.Sprintf("%s: the eval job %s%s without uploading %s", prefix, eval.State, exitText(eval.ExitStatus), contract.ResultFile)
	}
	return fmt.Sprintf("%s but the eval job uploaded no %s", prefix, contract.ResultFile)
}

func exitText(code *int) string {
	if code == nil {
		return ""
	}
	return fmt.Sprintf(" (exit status %d)", *code)
}

// failed is the FullResult of a run that produced none: no system info,
// no runs, the reason in error.
func failed(msg string) *payload.FullResult {
	return payload.Failed(payload.SystemInfo{}, errors.New(msg))
}
