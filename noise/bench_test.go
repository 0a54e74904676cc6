package noise

import "testing"

// BenchmarkRecordThisMachine is the cost of one run's noise record on
// this machine (before + after + verdict), GPU tools absent. The goal is
// < 10 ms (docs/performance.md).
func BenchmarkRecordThisMachine(b *testing.B) {
	for b.Loop() {
		s := NewSampler(Config{Env: []string{"PATH=/nonexistent"}})
		s.Begin("benchmark")
		s.End("benchmark")
		_ = s.Record(Policy{})
	}
}

// BenchmarkRecordWithStandInGPU adds the stand-in nvidia-smi (two forks
// per sample): the Go side of the GPU source, not the real tool's time.
func BenchmarkRecordWithStandInGPU(b *testing.B) {
	s := newScenario(b, "bare")
	s.load("after")
	cfg := s.cfg
	cfg.ProcRoot, cfg.SysRoot = "/proc", "/sys"
	cfg.Self = 0
	cfg.Rusage, cfg.Now = nil, nil
	for b.Loop() {
		smp := NewSampler(cfg)
		smp.Begin("benchmark")
		smp.End("benchmark")
		_ = smp.Record(Policy{})
	}
}
