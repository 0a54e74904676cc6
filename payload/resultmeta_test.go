package payload

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"strings"
	"testing"
)

func TestResultMetaDataRoundTrip(t *testing.T) {
	t.Parallel()
	in := []byte(`{"success": true, "error": "", "system": {}, "runs": {}}`)
	const job = "0190e6d2-5a7b-4c1e-9f00-1234567890ab"
	enc, ok := EncodeResultMetaData(job, in)
	if !ok || !strings.HasPrefix(enc, job+":") {
		t.Fatalf("a small result: %q, fits %v", enc, ok)
	}
	id, out, err := DecodeResultMetaData(enc)
	if err != nil || string(out) != string(in) || id != job {
		t.Fatalf("round trip: %q %q, %v", id, out, err)
	}
	for _, bad := range []string{"!!", "aGVsbG8=", "job:!!", "job:aGVsbG8="} {
		if _, _, err := DecodeResultMetaData(bad); err == nil {
			t.Errorf("DecodeResultMetaData(%q) accepted garbage", bad)
		}
	}
	for _, id := range []string{"", "a:b", "a b"} {
		if _, ok := EncodeResultMetaData(id, in); ok {
			t.Errorf("job id %q accepted", id)
		}
	}
}

// TestResultMetaDataUnstamped: a value from a runner before the stamp
// decodes with no job id, which no reader takes for the latest job's.
func TestResultMetaDataUnstamped(t *testing.T) {
	t.Parallel()
	in := []byte(`{"success": true}`)
	var buf bytes.Buffer
	zw := zlib.NewWriter(&buf)
	_, _ = zw.Write(in)
	_ = zw.Close()
	id, out, err := DecodeResultMetaData(base64.StdEncoding.EncodeToString(buf.Bytes()))
	if err != nil || id != "" || string(out) != string(in) {
		t.Fatalf("unstamped: %q %q %v", id, out, err)
	}
}

func TestResultMetaDataTooLarge(t *testing.T) {
	t.Parallel()
	// Incompressible-ish text: the encoded form must not fit.
	var b strings.Builder
	x := uint32(1)
	for b.Len() < 200<<10 {
		x = x*1664525 + 1013904223
		b.WriteByte(byte('a' + x>>27))
	}
	if _, ok := EncodeResultMetaData("job-1", []byte(b.String())); ok {
		t.Fatal("a 200 KiB random result claims to fit in meta-data")
	}
}
