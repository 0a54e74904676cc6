package main

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
)

// BenchmarkGenerateProcess runs `kbgen generate` as a whole process on a
// 64 KiB payload in the build env, as the bootstrap step does, and reports
// the median wall time and the peak RSS (targets: 15 ms, 40 MB).
//
//	go test -run '^$' -bench GenerateProcess -benchtime 100x ./cmd/kbgen
func BenchmarkGenerateProcess(b *testing.B) {
	bin := kbgenbin.Path(b)
	in, err := pipelinegen.ExampleJob(payload.ModeLeaderboard)
	if err != nil {
		b.Fatal(err)
	}
	cfg := *in.Config
	cfg.Sources = map[string]string{"eval.py": "", "submission.py": randomText(80 << 10)}
	enc, err := payload.EncodeConfig(&cfg)
	if err != nil {
		b.Fatal(err)
	}
	if len(enc) < 60<<10 || len(enc) > 70<<10 {
		b.Fatalf("payload is %d bytes, not ~64 KiB", len(enc))
	}
	env := []string{"PATH=" + os.Getenv("PATH"), contract.EnvQueue + "=nvidia-h100", contract.EnvRunID + "=bench"}
	for k, v := range payload.SplitEnv(enc) {
		env = append(env, k+"="+v)
	}
	var walls []time.Duration
	var maxRSS int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cmd := exec.Command(bin, "generate")
		cmd.Env = env
		var out strings.Builder
		cmd.Stdout = &out
		start := time.Now()
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		walls = append(walls, time.Since(start))
		if !strings.Contains(out.String(), "kbgen run") {
			b.Fatal("no pipeline printed")
		}
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			maxRSS = max(maxRSS, ru.Maxrss) // KiB on Linux
		}
	}
	b.StopTimer()
	slices.Sort(walls)
	b.ReportMetric(float64(walls[len(walls)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(maxRSS)/1024, "peak-RSS-MB")
}
