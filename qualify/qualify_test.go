package qualify

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/sandbox"
)

// fakeLauncher returns canned calibrations: quiet runs, and loaded runs
// slowed by slow[agent] while any load runs.
type fakeLauncher struct {
	mu      sync.Mutex
	loads   int
	started []string
	quiet   map[string][]float64
	loaded  map[string][]float64
	steal   float64
}

func (f *fakeLauncher) Name() string { return "fake" }

func (f *fakeLauncher) Calibrate(ctx context.Context, a node.Agent, args []string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	times := f.quiet[a.ID]
	if f.loads > 0 {
		times = f.loaded[a.ID]
	}
	c := Calibration{Iterations: 1}
	for _, t := range times {
		r := Run{MeanMS: t, StealPercent: f.steal, Verdict: "clean"}
		if f.steal > 5 {
			r.Verdict, r.Reasons = "noisy", []string{fmt.Sprintf("hypervisor steal %.1f %% on CPUs 1 (threshold 5 %%)", f.steal)}
		}
		c.Runs = append(c.Runs, r)
	}
	return json.Marshal(c)
}

func (f *fakeLauncher) StartLoad(ctx context.Context, a node.Agent, d time.Duration) (func(), error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.loads++
	f.started = append(f.started, a.ID)
	return func() { f.mu.Lock(); f.loads--; f.mu.Unlock() }, nil
}

func twoAgents(cpus0, cpus1 string) *node.Plan {
	return &node.Plan{Runtime: "nvidia", HostCPUs: "0", CgroupVersion: 1, Agents: []node.Agent{
		{ID: "gpu0", GPU: node.GPU{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000"}, CPUSet: cpus0, Mems: "0", Memory: "1g"},
		{ID: "gpu1", GPU: node.GPU{Index: 1, UUID: "GPU-11111111-1111-1111-1111-111111111111"}, CPUSet: cpus1, Mems: "0", Memory: "1g"},
	}}
}

func TestVerdicts(t *testing.T) {
	f := &fakeLauncher{
		quiet:  map[string][]float64{"gpu0": {10, 10.05, 9.95, 10}, "gpu1": {10, 11, 9, 10}},
		loaded: map[string][]float64{"gpu0": {10.1, 10.1, 10.1, 10.1}, "gpu1": {13, 13, 13, 13}},
	}
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1})
	if err != nil {
		t.Fatal(err)
	}
	if r.Pass || len(r.Agents) != 2 {
		t.Fatalf("report %+v: want a failing node of 2 agents", r)
	}
	a0, a1 := r.Agents[0], r.Agents[1]
	if a0.Verdict != "pass" || a0.CVPercent != 0.41 || a0.ShiftPercent != 1 {
		t.Errorf("gpu0 = %+v, want pass, CV 0.41 %%, shift +1 %%", a0)
	}
	if a1.Verdict != "fail" || a1.CVPercent != 8.16 || a1.ShiftPercent != 30 || len(a1.Why) != 2 {
		t.Errorf("gpu1 = %+v, want fail on CV 8.16 %% and shift +30 %%", a1)
	}
	// Each agent is loaded while the other calibrates, and every load stopped.
	if strings.Join(f.started, ",") != "gpu1,gpu0" || f.loads != 0 {
		t.Errorf("loads started %v, %d still running", f.started, f.loads)
	}
}

func TestStealFailsAndIsNamed(t *testing.T) {
	flat := []float64{10, 10, 10, 10}
	f := &fakeLauncher{quiet: map[string][]float64{"gpu0": flat, "gpu1": flat}, loaded: map[string][]float64{"gpu0": flat, "gpu1": flat}, steal: 12}
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Agents[0]
	if a.Verdict != "fail" || a.StealPercent != 12 || a.NoisyRuns != 8 || strings.Join(a.NoiseSources, ",") != "hypervisor steal" {
		t.Errorf("agent = %+v, want fail on 12 %% steal, 8 noisy runs, source hypervisor steal", a)
	}
}

func TestFloatingGivesEveryAgentAllCPUs(t *testing.T) {
	flat := []float64{10, 10}
	f := &fakeLauncher{quiet: map[string][]float64{"gpu0": flat, "gpu1": flat}, loaded: map[string][]float64{"gpu0": flat, "gpu1": flat}}
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1-2", "3-4"), Launcher: f, Iterations: 1, Floating: true})
	if err != nil {
		t.Fatal(err)
	}
	if r.Agents[0].CPUs != "0-4" || r.Agents[1].CPUs != "0-4" || !r.Floating {
		t.Errorf("floating CPUs = %s / %s", r.Agents[0].CPUs, r.Agents[1].CPUs)
	}
}

func TestKernelWorkIsFixed(t *testing.T) {
	n := IterationsFor(5 * time.Millisecond)
	if n < 1000 {
		t.Fatalf("IterationsFor = %d", n)
	}
	c, err := Calibrate(context.Background(), CalibrateOptions{Runs: 3, Reps: 2, Iterations: n})
	if err != nil {
		t.Fatal(err)
	}
	if c.Iterations != n || len(c.Runs) != 3 || c.Runs[0].MeanMS <= 0 || c.Runs[0].MinMS > c.Runs[0].MeanMS {
		t.Errorf("calibration %+v", c)
	}
}

// machinePlan is two agents on this machine's first two CPUs.
func machinePlan(t *testing.T) *node.Plan {
	if runtime.NumCPU() < 2 {
		t.Skip("needs two CPUs")
	}
	return twoAgents("0", "1")
}

// TestDirectOnThisMachine: the real calibration and load, pinned, through
// the kbgen binary (the --no-sandbox path a host without docker takes).
func TestDirectOnThisMachine(t *testing.T) {
	bin := kbgenbin.Path(t)
	r, err := Qualify(context.Background(), Options{Plan: machinePlan(t), Launcher: &Direct{Binary: bin}, Runs: 3, Reps: 2, RepDuration: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Agents {
		if a.Error != "" || a.QuietMeanMS <= 0 || a.LoadedMeanMS <= 0 || (a.Verdict != "pass" && len(a.Why) == 0) {
			t.Errorf("agent %+v", a)
		}
	}
}

// TestSandboxOnThisMachine: the same through the sandbox's docker run
// (GPU flags off), in the local busybox image with kbgen mounted.
func TestSandboxOnThisMachine(t *testing.T) {
	testimage.RequireDocker(t)
	plan := machinePlan(t)
	d := &Docker{Plan: plan, Image: testimage.Busybox(t), RunnerBinary: kbgenbin.Path(t), Host: sandbox.LocalHost(), NoGPU: true, Tag: fmt.Sprint(os.Getpid())}
	r, err := Qualify(context.Background(), Options{Plan: plan, Launcher: d, Runs: 3, Reps: 2, RepDuration: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Agents {
		if a.Error != "" || a.QuietMeanMS <= 0 || a.LoadedMeanMS <= 0 {
			t.Errorf("agent %+v", a)
		}
	}
}

// TestGPUPart: with a GPU runner, each agent also gets the GPU
// calibration, quiet and with the other GPUs busy; a stand-in python3
// plays torch (slower while a load process runs).
func TestGPUPart(t *testing.T) {
	dir := t.TempDir()
	py := dir + "/python3"
	script := `#!/bin/sh
# stand-in python3 -c SCRIPT calibrate RUNS REPS SIZE | load SECONDS SIZE
shift 2
if [ "$1" = load ]; then touch "` + dir + `/loading"; sleep "$2"; exit 0; fi
m=1.0; [ -e "` + dir + `/loading" ] && m=1.5
echo "{\"device\": \"Stand-in GPU $CUDA_VISIBLE_DEVICES\", \"runs\": [{\"mean_ms\": $m}, {\"mean_ms\": $m}, {\"mean_ms\": $m}]}"
`
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	flat := []float64{10, 10}
	f := &fakeLauncher{quiet: map[string][]float64{"gpu0": flat, "gpu1": flat}, loaded: map[string][]float64{"gpu0": flat, "gpu1": flat}}
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1, GPU: &GPURunner{Python: py, Env: []string{"PATH=/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	g := r.Agents[0].GPU
	if r.GPU != "ran" || g == nil || g.Device != "Stand-in GPU GPU-00000000-0000-0000-0000-000000000000" || g.QuietMeanMS != 1 || g.CVPercent != 0 {
		t.Fatalf("GPU part = %+v (report gpu %q)", g, r.GPU)
	}
	if g.ShiftPercent != 50 || g.Verdict != "fail" || r.Agents[0].Verdict != "fail" {
		t.Errorf("GPU under load = %+v, agent verdict %s: want +50 %% and a failing agent", g, r.Agents[0].Verdict)
	}
	r, _ = Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1, GPUNote: "no python3 on PATH"})
	if r.GPU != "skipped: no python3 on PATH" || r.Agents[0].GPU != nil {
		t.Errorf("without a GPU runner: %q, %+v", r.GPU, r.Agents[0].GPU)
	}
}
