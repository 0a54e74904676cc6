package payload

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"flag"
	"io"
	"runtime"
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

// lcgReader yields n bytes of cheap pseudo-random letters (incompressible
// enough), or zeros when zeros is set, without holding them.
type lcgReader struct {
	n     int64
	x     uint32
	zeros bool
}

func (r *lcgReader) Read(p []byte) (int, error) {
	if r.n <= 0 {
		return 0, io.EOF
	}
	p = p[:min(int64(len(p)), r.n)]
	for i := range p {
		if r.zeros {
			p[i] = 0
			continue
		}
		r.x = r.x*1664525 + 1013904223
		p[i] = byte('a' + r.x>>27)
	}
	r.n -= int64(len(p))
	return len(p), nil
}

var compare = flag.Bool("compare", false, "TestEncodeResultMetaDataFromIsBounded: also measure the whole-file encoding (slow)")

// allocated is the bytes f allocates.
func allocated(f func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	f()
	runtime.ReadMemStats(&b)
	return b.TotalAlloc - a.TotalAlloc
}

// TestEncodeResultMetaDataFromIsBounded: the streamed encoding agrees
// with EncodeResultMetaData on what fits, and a 266 MB result.json (issue
// 20: the host's publish took 1.8 GB) costs it under 2 MiB, random or
// zeros (-compare also measures the old whole-file encoding).
func TestEncodeResultMetaDataFromIsBounded(t *testing.T) {
	small := []byte(`{"success": true, "error": "", "system": {}, "runs": {}}`)
	enc, ok, err := EncodeResultMetaDataFrom("job-1", bytes.NewReader(small))
	if want, _ := EncodeResultMetaData("job-1", small); err != nil || !ok || enc != want {
		t.Fatalf("small result: %q %v %v, want %q", enc, ok, err, want)
	}
	if _, ok, err := EncodeResultMetaDataFrom("a:b", bytes.NewReader(small)); ok || err != nil {
		t.Errorf("a job id with the separator was stamped: %v %v", ok, err)
	}
	const size = 266 << 20
	for _, tt := range []struct {
		name  string
		zeros bool
	}{{"random", false}, {"zeros", true}} {
		t.Run(tt.name, func(t *testing.T) {
			var fits bool
			got := allocated(func() { _, fits, err = EncodeResultMetaDataFrom("job-1", &lcgReader{n: size, x: 1, zeros: tt.zeros}) })
			if err != nil || fits {
				t.Fatalf("a 266 MB result: fits %v, %v", fits, err)
			}
			t.Logf("266 MB result.json (%s): streamed, %d KiB allocated", tt.name, got>>10)
			if *compare {
				before := allocated(func() {
					data, _ := io.ReadAll(&lcgReader{n: size, x: 1, zeros: tt.zeros})
					_, fits = EncodeResultMetaData("job-1", data)
				})
				t.Logf("266 MB result.json (%s): read whole as before, %d MiB allocated", tt.name, before>>20)
			}
			if got > 2<<20 {
				t.Errorf("streamed encoding allocated %d KiB", got>>10)
			}
		})
	}
}
