package client

import (
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/payload"
)

// ErrNoResultMetaData is MetaDataResult's answer for a build that carries
// no result meta-data at all (an older runner, a result too large for it,
// a job that never published): not a fault, the artifact is read.
var ErrNoResultMetaData = errors.New("no result meta-data")

// MetaDataResult is the result a finished build carries as meta-data
// (payload.ResultMetaDataKey), when it belongs to the build's latest eval
// job. b must carry its jobs. Meta-data is per build, last write wins and
// is never deleted (pages/pipelines/configure/build_meta_data.md in
// buildkite/docs), so after a retry the value may be an earlier attempt's:
// it is trusted only when stamped with the latest eval job's id. The error
// says why the value is not used; the caller then reads that job's
// result.json artifact. This is the one rule kbgen serve and kbgen submit
// share (Client.Result), so the two report the same result.
func MetaDataResult(b *Build) (*payload.FullResult, error) {
	v := b.MetaData[payload.ResultMetaDataKey]
	if v == "" {
		return nil, ErrNoResultMetaData
	}
	job, data, err := payload.DecodeResultMetaData(v)
	if err != nil {
		return nil, fmt.Errorf("build %d carries an unreadable result meta-data: %w", b.Number, err)
	}
	eval := b.EvalJob()
	if eval == nil || job == "" || job != eval.ID {
		latest := "none"
		if eval != nil {
			latest = eval.ID
		}
		return nil, fmt.Errorf("build %d's result meta-data is from job %q, not its latest eval job (%s)", b.Number, job, latest)
	}
	res, err := ParseResult(data)
	if err != nil {
		return nil, fmt.Errorf("build %d carries an unreadable result meta-data: %w", b.Number, err)
	}
	return res, nil
}

// HasProfile reports whether any run of res carries a profile: its
// download_url is the eval job's profile artifact (LinkProfiles), which
// only the job's artifact list names.
func HasProfile(res *payload.FullResult) bool {
	for _, run := range res.Runs {
		if run.Profile != nil {
			return true
		}
	}
	return false
}
