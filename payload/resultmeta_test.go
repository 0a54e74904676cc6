package payload

import (
	"strings"
	"testing"
)

func TestResultMetaDataRoundTrip(t *testing.T) {
	in := []byte(`{"success": true, "error": "", "system": {}, "runs": {}}`)
	enc, ok := EncodeResultMetaData(in)
	if !ok {
		t.Fatal("a small result does not fit")
	}
	out, err := DecodeResultMetaData(enc)
	if err != nil || string(out) != string(in) {
		t.Fatalf("round trip: %q, %v", out, err)
	}
	for _, bad := range []string{"!!", "aGVsbG8="} {
		if _, err := DecodeResultMetaData(bad); err == nil {
			t.Errorf("DecodeResultMetaData(%q) accepted garbage", bad)
		}
	}
}

func TestResultMetaDataTooLarge(t *testing.T) {
	// Incompressible-ish text: the encoded form must not fit.
	var b strings.Builder
	x := uint32(1)
	for b.Len() < 200<<10 {
		x = x*1664525 + 1013904223
		b.WriteByte(byte('a' + x>>27))
	}
	if _, ok := EncodeResultMetaData([]byte(b.String())); ok {
		t.Fatal("a 200 KiB random result claims to fit in meta-data")
	}
}
