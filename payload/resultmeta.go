package payload

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"
)

// ResultMetaDataKey is the build meta-data key that carries the eval job's
// result.json, base64(zlib(json)) like a payload, so a watcher that lists
// builds reads results without one more request per build. The result.json
// artifact stays the reference: a build without the key (too large, an
// older runner) is read from it.
//
// Meta-data is per build, last write wins and is never deleted
// (pages/pipelines/configure/build_meta_data.md in buildkite/docs), while
// an eval step may run several jobs (a retry is a new job). So the value
// is stamped with the job that wrote it: "JOB_ID:BASE64". A reader uses it
// only when JOB_ID is the build's latest eval job; anything else (an
// earlier attempt's result, an unstamped value) is read from that job's
// artifact instead, so the watcher and kbgen submit report the same result.
const ResultMetaDataKey = "kbgen_result"

// MaxResultMetaDataBytes is the largest encoded result set as meta-data;
// Buildkite caps one meta-data value at 100 KiB.
const MaxResultMetaDataBytes = 96 << 10

// EncodeResultMetaData stamps result.json with the job that produced it
// (BUILDKITE_JOB_ID) and compresses it for ResultMetaDataKey. ok is false
// when the value would exceed MaxResultMetaDataBytes, or the job id is
// missing or could be mistaken for the separator.
func EncodeResultMetaData(jobID string, resultJSON []byte) (string, bool) {
	if jobID == "" || strings.ContainsAny(jobID, ": \t\n") {
		return "", false
	}
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	_, _ = zw.Write(resultJSON)
	_ = zw.Close()
	s := jobID + ":" + base64.StdEncoding.EncodeToString(buf.Bytes())
	return s, len(s) <= MaxResultMetaDataBytes
}

// EncodeResultMetaDataFrom is EncodeResultMetaData reading result.json
// from r as a stream: the compressed form is written into a buffer that
// stops at what base64 can fit in MaxResultMetaDataBytes, so memory stays
// under 100 KiB whatever r holds (a result.json is the container's to
// size; the host must not load it whole: issue 20 saw 1.8 GB for 266 MB).
// ok is false, with no error, when it does not fit; reading stops there.
func EncodeResultMetaDataFrom(jobID string, r io.Reader) (string, bool, error) {
	if jobID == "" || strings.ContainsAny(jobID, ": \t\n") {
		return "", false, nil
	}
	buf := &cappedBuffer{max: base64.StdEncoding.DecodedLen(MaxResultMetaDataBytes - len(jobID) - 1)}
	zw := zlib.NewWriter(buf)
	_, err := io.Copy(zw, r)
	if err == nil {
		err = zw.Close()
	}
	switch {
	case errors.Is(err, errTooLarge):
		return "", false, nil
	case err != nil:
		return "", false, err
	}
	s := jobID + ":" + base64.StdEncoding.EncodeToString(buf.b.Bytes())
	return s, len(s) <= MaxResultMetaDataBytes, nil
}

var errTooLarge = errors.New("result meta-data: over the limit")

// cappedBuffer fails a write that would take it past max bytes.
type cappedBuffer struct {
	b   bytes.Buffer
	max int
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	if c.b.Len()+len(p) > c.max {
		return 0, errTooLarge
	}
	return c.b.Write(p)
}

// DecodeResultMetaData splits a ResultMetaDataKey value into the job id
// that wrote it ("" for an unstamped value from an older runner) and the
// result.json bytes, inflated up to MaxInflatedBytes.
func DecodeResultMetaData(v string) (jobID string, resultJSON []byte, err error) {
	if id, rest, ok := strings.Cut(v, ":"); ok { // base64 has no ':'
		jobID, v = id, rest
	}
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return "", nil, fmt.Errorf("result meta-data is not base64: %w", err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		return "", nil, fmt.Errorf("result meta-data is not zlib: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, MaxInflatedBytes+1))
	if err != nil {
		return "", nil, fmt.Errorf("result meta-data is not zlib: %w", err)
	}
	if len(out) > MaxInflatedBytes {
		return "", nil, fmt.Errorf("result meta-data inflates past %d bytes", MaxInflatedBytes)
	}
	return jobID, out, nil
}
