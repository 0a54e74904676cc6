package noise

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestRealMachine samples this machine around a real CPU-bound child: the
// CPU sources must read, the child's context switches must show, and the
// runner's own pid must not be foreign.
func TestRealMachine(t *testing.T) {
	if _, err := os.Stat("/proc/stat"); err != nil {
		t.Skip("no /proc/stat: not Linux")
	}
	s := NewSampler(Config{Env: []string{"PATH=/nonexistent"}})
	s.Begin("benchmark")
	cmd := exec.Command("sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	s.End("benchmark")
	rec := s.Record(Policy{})
	run := rec.Runs["benchmark"]
	if run.Steal.Status != OK {
		t.Errorf("steal = %+v, want ok on a Linux machine", run.Steal)
	}
	if run.Throttling.Status != OK {
		t.Errorf("cgroup throttling = %+v, want ok", run.Throttling)
	}
	if run.ContextSwitches.Status != OK || run.ContextSwitches.Voluntary+run.ContextSwitches.Involuntary == 0 {
		t.Errorf("context switches = %+v, want the child's", run.ContextSwitches)
	}
	if run.Foreign.Status != OK || run.Foreign.Visible == 0 {
		t.Errorf("foreign = %+v", run.Foreign)
	}
	for _, p := range run.Foreign.Top {
		if p.PID == os.Getpid() {
			t.Errorf("the sampler's own process counted as foreign: %+v", p)
		}
	}
	if run.NVIDIA.Status != Unavailable || run.NVIDIA.Why != "nvidia-smi not found on PATH" {
		t.Errorf("nvidia = %+v", run.NVIDIA.Availability)
	}
	if rec.CostMS <= 0 || run.CostMS <= 0 {
		t.Errorf("cost = %v / %v, want it measured", rec.CostMS, run.CostMS)
	}
}
