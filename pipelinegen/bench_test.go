package pipelinegen

import (
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
)

// payload64K is a job whose encoded payload is about 64 KiB, the size the
// performance target names.
func payload64K(tb testing.TB) string {
	tb.Helper()
	in, err := ExampleJob(payload.ModeLeaderboard)
	if err != nil {
		tb.Fatal(err)
	}
	cfg := *in.Config
	var src strings.Builder
	x := uint32(7)
	for src.Len() < 55<<10 {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		src.WriteByte(byte(' ' + x%94))
	}
	cfg.Sources = map[string]string{"eval.py": "", "submission.py": src.String()}
	enc, err := payload.EncodeConfig(&cfg)
	if err != nil {
		tb.Fatal(err)
	}
	if len(enc) < 60<<10 || len(enc) > 70<<10 {
		tb.Fatalf("payload is %d bytes, not ~64 KiB", len(enc))
	}
	return enc
}

// BenchmarkGenerate64K: decode + validate a 64 KiB payload, generate the
// pipeline and marshal it, in process.
func BenchmarkGenerate64K(b *testing.B) {
	enc := payload64K(b)
	reg, err := registry.Load("")
	if err != nil {
		b.Fatal(err)
	}
	v, _ := reg.Lookup("nvidia-h100")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		in, err := payload.ParseInput([]byte(enc))
		if err != nil {
			b.Fatal(err)
		}
		p, err := Generate(Job{Input: in, RunID: "bench"}, v, Options{})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := Marshal(p); err != nil {
			b.Fatal(err)
		}
	}
}
