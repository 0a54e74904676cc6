package payload

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// gigabyteBomb builds a payload that inflates to about 1 GiB of zeros
// without compressing 1 GiB: one flushed deflate block of 1 MiB of zeros
// back-references only zeros, so repeating its bytes repeats the output.
func gigabyteBomb(t *testing.T) string {
	t.Helper()
	var b bytes.Buffer
	w, _ := zlib.NewWriterLevel(&b, zlib.BestCompression)
	zeros := make([]byte, 1<<20)
	w.Write(zeros)
	w.Flush()
	head := len(b.Bytes())
	w.Write(zeros)
	w.Flush()
	block := append([]byte(nil), b.Bytes()[head:]...)
	stream := append([]byte(nil), b.Bytes()[:head]...)
	for i := 0; i < 1023; i++ {
		stream = append(stream, block...)
	}
	return base64.StdEncoding.EncodeToString(stream)
}

// TestGigabyteZipBombStopped is not parallel: it measures allocation with
// runtime.MemStats, which counts every goroutine of the process, and beside
// the package's parallel tests it once read 180 MiB (a fresh-clone CI run).
// go test runs the serial tests before it resumes any parallel one.
func TestGigabyteZipBombStopped(t *testing.T) {
	enc := gigabyteBomb(t)
	if len(enc) > MaxEncodedBytes {
		t.Fatalf("bomb of %d bytes is over the encoded limit; it would not test the inflate limit", len(enc))
	}
	// The stream really inflates far past the limit: count (without
	// keeping) the first 64 MiB. All of it is 1 GiB; reading that here
	// would only slow the test.
	raw, _ := base64.StdEncoding.DecodeString(enc)
	zr, err := zlib.NewReader(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	buf := make([]byte, 1<<20)
	for n < 64<<20 {
		k, err := zr.Read(buf)
		n += int64(k)
		if err != nil {
			break
		}
	}
	if n < 64<<20 {
		t.Fatalf("bomb inflates to only %d bytes", n)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err = Decode(enc)
	runtime.ReadMemStats(&after)
	var je *Error
	if !errors.As(err, &je) || je.Kind != KindTooLarge {
		t.Fatalf("want too-large, got %v", err)
	}
	// The message is the contract: the submitter reads the limit, on one line.
	if !strings.Contains(err.Error(), "16 MiB limit") || strings.Contains(err.Error(), "\n") {
		t.Errorf("error should name the limit on one line: %q", err)
	}
	// Reading stops at the limit: allocation is a small multiple of it
	// (buffer growth, and more under -race), not of the gigabyte.
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8*MaxInflatedBytes {
		t.Errorf("decoding the bomb allocated %d MiB", alloc>>20)
	}
}

func TestJSONDepthLimit(t *testing.T) {
	t.Parallel()
	nest := func(depth int) string {
		// The config object itself is level 1.
		return `{"lang":"py","mode":"test","sources":{"a.py":""},"main":"a.py","tests":[{"n":1}],"x":` +
			strings.Repeat("[", depth-1) + strings.Repeat("]", depth-1) + "}"
	}
	if _, err := ParseJSON([]byte(nest(MaxJSONDepth))); err != nil {
		t.Fatalf("depth %d must be accepted: %v", MaxJSONDepth, err)
	}
	_, err := ParseJSON([]byte(nest(MaxJSONDepth + 1)))
	var je *Error
	if !errors.As(err, &je) || je.Kind != KindTooDeep {
		t.Fatalf("depth %d: want too-deep, got %v", MaxJSONDepth+1, err)
	}
	// Brackets inside strings are text, not nesting.
	inString := `{"lang":"py","mode":"test","sources":{"a.py":"` + strings.Repeat("[{", 1000) + `\"` + `"},"main":"a.py","tests":[{"n":1}]}`
	if _, err := ParseJSON([]byte(inString)); err != nil {
		t.Fatalf("brackets in a string counted as nesting: %v", err)
	}
	// A million levels is refused before any decoder recurses.
	_, err = Encode([]byte(strings.Repeat("[", 1<<20)))
	if err == nil || !errors.As(err, &je) || je.Kind != KindTooDeep {
		t.Fatalf("encode of 1M levels: want too-deep, got %v", err)
	}
}

func TestHugeJSONLimits(t *testing.T) {
	t.Parallel()
	big := `{"lang":"py","mode":"test","main":"a.py","tests":[{"n":1}],"sources":{"a.py":"` + strings.Repeat("x", MaxInflatedBytes) + `"}}`
	_, err := ParseJSON([]byte(big))
	var je *Error
	if !errors.As(err, &je) || je.Kind != KindTooLarge {
		t.Fatalf("config over %d bytes: want too-large, got %v", MaxInflatedBytes, err)
	}
	_, err = Decode(strings.Repeat("A", MaxEncodedBytes+4))
	if !errors.As(err, &je) || je.Kind != KindTooLarge {
		t.Fatalf("payload over %d bytes: want too-large, got %v", MaxEncodedBytes, err)
	}
	// Just under the limits is fine: random-ish source text that does not
	// compress away, as large as the encoded limit allows.
	var sb strings.Builder
	x := uint32(1)
	for sb.Len() < MaxEncodedBytes/2 {
		x = x*1664525 + 1013904223
		sb.WriteByte(byte('a' + x>>27))
	}
	ok := `{"lang":"py","mode":"test","main":"a.py","tests":[{"n":1}],"sources":{"a.py":"` + sb.String() + `"}}`
	enc, err := Encode([]byte(ok))
	if err != nil {
		t.Fatal(err)
	}
	if len(enc) > MaxEncodedBytes {
		t.Fatalf("test job is %d bytes encoded, over the limit", len(enc))
	}
	if _, err := Decode(enc); err != nil {
		t.Fatalf("job of %d encoded bytes refused: %v", len(enc), err)
	}
}

// TestDuplicateKeysLastWins: Python's json keeps the last of repeated keys;
// kbgen must read the same job, not a merge of both (a differential that
// would let a crafted payload add files Kernelbot's backend never saw).
func TestDuplicateKeysLastWins(t *testing.T) {
	t.Parallel()
	js := `{"lang":"py","mode":"test","main":"eval.py",` +
		`"sources":{"eval.py":"","extra.py":"1"},"sources":{"eval.py":"","submission.py":""},` +
		`"defines":{"A":1},"defines":{"B":2},"tests":[{"n":1}],"tests":[{"n":2}],"seed":5,"seed":null}`
	c, err := ParseJSON([]byte(js))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := c.Sources["extra.py"]; ok || len(c.Sources) != 2 {
		t.Errorf("sources merged: %v", c.Sources)
	}
	if _, ok := c.Defines["A"]; ok || len(c.Defines) != 1 {
		t.Errorf("defines merged: %v", c.Defines)
	}
	if len(c.Tests) != 1 || c.Tests[0].Line() != "n: 2" || c.Seed != nil {
		t.Errorf("tests %v seed %v", c.Tests, c.Seed)
	}
}
