package store

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/fleet/canary"
)

// BenchmarkStoreBytesPerRun measures what one finished run costs on disk
// in SQLite (docs/performance.md, "Watching the fleet"): runs shaped as
// kbgen serve records them at 100 agents (a Kernelbot run id, one eval
// attempt with its facts, one in 20 retried after a machine fault), the
// WAL checkpointed into the database file, divided by the runs. Reports
// bytes/run and the day's total at 1,000 runs an hour.
func BenchmarkStoreBytesPerRun(b *testing.B) {
	const runs = 24000 // one day at 1,000 runs an hour
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	per := bytesPer(b, runs, func(ctx context.Context, s *Store, i int) error { return s.RecordRun(ctx, dayRun(i, t0)) })
	b.ReportMetric(per, "bytes/run")
	b.ReportMetric(per*runs/1e6, "MB/day")
}

// bytesPer is what n records grow a new database by, each: record writes
// the i-th, the WAL checkpointed into the file before and after.
func bytesPer(b *testing.B, n int, record func(context.Context, *Store, int) error) float64 {
	b.Helper()
	var per float64
	for range b.N {
		path := filepath.Join(b.TempDir(), "s.db")
		ctx := context.Background()
		s, err := Open(ctx, Options{Path: path, Service: "kbgen"})
		if err != nil {
			b.Fatal(err)
		}
		empty := size(b, s, path)
		for i := range n {
			if err := record(ctx, s, i); err != nil {
				b.Fatal(err)
			}
		}
		per = float64(size(b, s, path)-empty) / float64(n)
		s.Close()
	}
	return per
}

// dayRun is the i-th run of a day: agents gpu-node-N-gpuM of 13 nodes,
// 100 agents, 10 queues.
func dayRun(i int, t0 time.Time) Run {
	agent := i % 100
	node := fmt.Sprintf("gpu-node-%d", agent/8)
	at := t0.Add(time.Duration(i) * 3600 * time.Millisecond)
	exit := 0
	r := Run{ID: fmt.Sprintf("kernelbot-%d-%d-leaderboard-submission", 1_700_000_000+i, i%7), Queue: fmt.Sprintf("nvidia-h100-%d", agent%10),
		Outcome: "obtained", Build: 100000 + i, FinishedAt: at, Wait: 4200 * time.Millisecond, Detection: 300 * time.Millisecond}
	if i%20 == 0 {
		fault := 75
		r.Attempts = append(r.Attempts, Attempt{Attempt: 1, Agent: fmt.Sprintf("%s-gpu%d", node, (agent+1)%8), Queue: r.Queue, Node: node, Exit: &fault, Noise: "noisy", Xids: 1, ClockEventSeconds: 0.5})
	}
	r.Attempts = append(r.Attempts, Attempt{Attempt: len(r.Attempts) + 1, Agent: fmt.Sprintf("%s-gpu%d", node, agent%8), Queue: r.Queue, Node: node, Exit: &exit, Noise: "clean"})
	return r
}

// size is the database file's size once the WAL is checkpointed into it.
func size(b *testing.B, s *Store, path string) int64 {
	b.Helper()
	if _, err := s.exec(context.Background(), `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
		b.Fatal(err)
	}
	st, err := os.Stat(path)
	if err != nil {
		b.Fatal(err)
	}
	return st.Size()
}

// BenchmarkStoreBytesPerCanary is the same for canary points: 100 agents
// at --canary-every 6h make 400 a day, kept CanaryRetention.
func BenchmarkStoreBytesPerCanary(b *testing.B) {
	const points = 4000
	t0 := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC)
	per := bytesPer(b, points, func(ctx context.Context, s *Store, i int) error {
		agent := fmt.Sprintf("gpu-node-%d-gpu%d", (i%100)/8, i%8)
		return s.RecordCanary(ctx, canary.Point{Agent: agent, RunID: fmt.Sprintf("kbgen-canary-%s-%d", agent, 1_764_000_000_000+int64(i)), At: t0.Add(time.Duration(i) * time.Minute),
			Score: 4567.891 + float64(i%13), Fingerprint: "NVIDIA H100 80GB HBM3 / AMD EPYC 9654 96-Core Processor",
			Context: canary.Context{Driver: "550.54.15", ImageDigest: "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef", KbgenVersion: "kbgen v1.2.0 (abc1234, 2026-11-27; go1.25, linux/amd64)",
				CPUModel: "AMD EPYC 9654 96-Core Processor", PowerLimit: "700 W"}})
	})
	b.ReportMetric(per, "bytes/point")
}
