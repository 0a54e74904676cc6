package payload

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"fmt"
	"io"
)

// ResultMetaDataKey is the build meta-data key that carries the eval job's
// result.json, base64(zlib(json)) like a payload, so a watcher that lists
// builds reads results without one more request per build. The result.json
// artifact stays the reference: a build without the key (too large, an
// older runner) is read from it.
const ResultMetaDataKey = "kbgen_result"

// MaxResultMetaDataBytes is the largest encoded result set as meta-data;
// Buildkite caps one meta-data value at 100 KiB.
const MaxResultMetaDataBytes = 96 << 10

// EncodeResultMetaData compresses result.json for ResultMetaDataKey. ok is
// false when the encoded form would exceed MaxResultMetaDataBytes.
func EncodeResultMetaData(resultJSON []byte) (string, bool) {
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	_, _ = zw.Write(resultJSON)
	_ = zw.Close()
	s := base64.StdEncoding.EncodeToString(buf.Bytes())
	return s, len(s) <= MaxResultMetaDataBytes
}

// DecodeResultMetaData inflates a ResultMetaDataKey value back to the
// result.json bytes, bounded by MaxInflatedBytes.
func DecodeResultMetaData(v string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(v)
	if err != nil {
		return nil, fmt.Errorf("result meta-data is not base64: %w", err)
	}
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("result meta-data is not zlib: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, MaxInflatedBytes+1))
	if err != nil {
		return nil, fmt.Errorf("result meta-data is not zlib: %w", err)
	}
	if len(out) > MaxInflatedBytes {
		return nil, fmt.Errorf("result meta-data inflates past %d bytes", MaxInflatedBytes)
	}
	return out, nil
}
