package qualify

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// fakeLauncher returns canned calibrations: --runs times taken in turn
// from quiet[agent], or from loaded[agent] while any load runs, each
// scaled by 1+drift×(calls so far) (a machine drifting with time). An
// agent's first call is the warm-up: 99 ms, which must never be judged.
type fakeLauncher struct {
	mu      sync.Mutex
	loads   int
	started []string
	quiet   map[string][]float64
	loaded  map[string][]float64
	steal   float64
	drift   float64
	calls   int
	cursor  map[string]int
	warm    map[string]bool
}

func (f *fakeLauncher) Name() string { return "fake" }

func (f *fakeLauncher) Calibrate(ctx context.Context, a node.Agent, args []string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cursor == nil {
		f.cursor, f.warm = map[string]int{}, map[string]bool{}
	}
	runs, _ := strconv.Atoi(args[slices.Index(args, "--runs")+1])
	times, key := f.quiet[a.ID], "q"+a.ID
	if f.loads > 0 {
		times, key = f.loaded[a.ID], "l"+a.ID
	}
	c := Calibration{Iterations: 1, CPU: 7}
	if !f.warm[a.ID] {
		f.warm[a.ID] = true
		return json.Marshal(Calibration{Iterations: 1, Runs: []Run{{MeanMS: 99}}})
	}
	f.calls++
	for range runs {
		t := times[f.cursor[key]%len(times)] * (1 + f.drift*float64(f.calls))
		f.cursor[key]++
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
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1, Runs: 4, Blocks: 2, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Pass || len(r.Agents) != 2 {
		t.Fatalf("report %+v: want a failing node of 2 agents", r)
	}
	a0, a1 := r.Agents[0], r.Agents[1]
	if a0.Verdict != "pass" || a0.CVPercent != 0.41 || *a0.ShiftPercent != 1 || a0.PinnedCPU != 7 {
		t.Errorf("gpu0 = %+v, want pass, CV 0.41 %%, shift +1 %%", a0)
	}
	if a1.Verdict != "fail" || a1.CVPercent != 8.16 || *a1.ShiftPercent != 30 || len(a1.Why) != 2 {
		t.Errorf("gpu1 = %+v, want fail on CV 8.16 %% and shift +30 %%", a1)
	}
	// Each agent is loaded while the other calibrates, once per loaded
	// block, and every load stopped.
	if strings.Join(f.started, ",") != "gpu1,gpu1,gpu0,gpu0" || f.loads != 0 {
		t.Errorf("loads started %v, %d still running", f.started, f.loads)
	}
}

func TestStealFailsAndIsNamed(t *testing.T) {
	flat := []float64{10, 10, 10, 10}
	f := &fakeLauncher{quiet: map[string][]float64{"gpu0": flat, "gpu1": flat}, loaded: map[string][]float64{"gpu0": flat, "gpu1": flat}, steal: 12}
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1, Runs: 4, Settle: time.Millisecond})
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
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1-2", "3-4"), Launcher: f, Iterations: 1, Floating: true, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if r.Agents[0].CPUs != "0-4" || r.Agents[1].CPUs != "0-4" || !r.Floating {
		t.Errorf("floating CPUs = %s / %s", r.Agents[0].CPUs, r.Agents[1].CPUs)
	}
}

// TestOneAgentHasNoLoadedPhase: alone on the node there is no neighbour
// to load; comparing two quiet phases measured only drift (−12.45 % on a
// real H100 VM) and failed the node.
func TestOneAgentHasNoLoadedPhase(t *testing.T) {
	f := &fakeLauncher{quiet: map[string][]float64{"gpu0": {10}}, loaded: map[string][]float64{"gpu0": {20}}, drift: 0.001}
	plan := twoAgents("1-15", "")
	plan.Agents = plan.Agents[:1]
	r, err := Qualify(context.Background(), Options{Plan: plan, Launcher: f, Iterations: 1, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Agents[0]
	if len(f.started) != 0 || a.ShiftPercent != nil || a.LoadedMeanMS != nil || a.LoadedCVPercent != nil || !strings.Contains(a.LoadSkipped, "no other agent") {
		t.Errorf("agent %+v, loads %v: want no load, no shift, and why", a, f.started)
	}
	if !r.Pass || a.Verdict != "pass" || a.QuietMeanMS > 10.1 {
		t.Errorf("agent %+v: want pass, quiet mean ≈ 10 ms (the 99 ms warm-up discarded)", a)
	}
	b, _ := json.Marshal(a)
	if !strings.Contains(string(b), `"shift_percent":null`) {
		t.Errorf("JSON %s: want shift_percent null", b)
	}
}

// TestInterleavingCancelsDrift: a machine drifting 1 % per block with no
// neighbour effect at all; all-quiet-then-all-loaded reported the drift
// as a shift, alternating blocks spread it over both sides.
func TestInterleavingCancelsDrift(t *testing.T) {
	flat := []float64{10}
	f := &fakeLauncher{quiet: map[string][]float64{"gpu0": flat, "gpu1": flat}, loaded: map[string][]float64{"gpu0": flat, "gpu1": flat}, drift: 0.01}
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1, Runs: 8, Blocks: 4, Settle: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	a := r.Agents[0]
	if a.ShiftPercent == nil || *a.ShiftPercent > 1 || *a.ShiftPercent < 0 {
		t.Fatalf("shift %v: want under 1 %% (one block's drift), not the whole run's", a.ShiftPercent)
	}
	if len(f.started) != 8 {
		t.Errorf("loads started %v: want one per loaded block (4 per agent)", f.started)
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
		if a.Error != "" || a.QuietMeanMS <= 0 || a.LoadedMeanMS == nil || *a.LoadedMeanMS <= 0 || (a.Verdict != "pass" && len(a.Why) == 0) {
			t.Errorf("agent %+v", a)
		}
		if fmt.Sprint(a.PinnedCPU) != a.CPUs {
			t.Errorf("agent %s: calibration thread on CPU %d, want pinned to its one CPU", a.Name, a.PinnedCPU)
		}
	}
}

// TestSandboxOnThisMachine: the same through the sandbox's docker run
// (GPU flags off), in the local busybox image with kbgen mounted.
func TestSandboxOnThisMachine(t *testing.T) {
	testimage.RequireDocker(t)
	plan := machinePlan(t)
	d := &Docker{Plan: plan, Image: testimage.Busybox(t), RunnerBinary: kbgenbin.Path(t), Host: dockerargv.LocalHost(), NoGPU: true, Tag: fmt.Sprint(os.Getpid())}
	r, err := Qualify(context.Background(), Options{Plan: plan, Launcher: d, Runs: 3, Reps: 2, RepDuration: 3 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range r.Agents {
		if a.Error != "" || a.QuietMeanMS <= 0 || a.LoadedMeanMS == nil || *a.LoadedMeanMS <= 0 {
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
# stand-in python3 -c SCRIPT calibrate RUNS REPS WINDOW_MS SIZE | load SECONDS SIZE
shift 2
if [ "$1" = load ]; then echo $$ > "` + dir + `/loading"; exec sleep "$2"; fi
echo "$@" >> "` + dir + `/calls"
m=1.0; kill -0 "$(cat "` + dir + `/loading" 2>/dev/null)" 2>/dev/null && m=1.5
echo "{\"device\": \"Stand-in GPU $CUDA_VISIBLE_DEVICES\", \"matmuls_per_sample\": 50, \"runs\": [{\"mean_ms\": $m}, {\"mean_ms\": $m}, {\"mean_ms\": $m}]}"
`
	if err := os.WriteFile(py, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	flat := []float64{10, 10}
	f := &fakeLauncher{quiet: map[string][]float64{"gpu0": flat, "gpu1": flat}, loaded: map[string][]float64{"gpu0": flat, "gpu1": flat}}
	gpu := &GPURunner{Python: py, Env: []string{"PATH=/usr/bin:/bin"}}
	r, err := Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1, Settle: 200 * time.Millisecond, GPU: gpu})
	if err != nil {
		t.Fatal(err)
	}
	g := r.Agents[0].GPU
	if r.GPU != "ran" || g == nil || g.Device != "Stand-in GPU GPU-00000000-0000-0000-0000-000000000000" || g.QuietMeanMS != 1 || g.CVPercent != 0 {
		t.Fatalf("GPU part = %+v (report gpu %q)", g, r.GPU)
	}
	if g.ShiftPercent == nil || *g.ShiftPercent != 50 || g.Verdict != "fail" || r.Agents[0].Verdict != "fail" || g.MatmulsPerSample != 50 {
		t.Errorf("GPU under load = %+v, agent verdict %s: want +50 %% and a failing agent", g, r.Agents[0].Verdict)
	}
	calls, _ := os.ReadFile(dir + "/calls")
	if !strings.HasPrefix(string(calls), "calibrate 4 20 10 4096\n") {
		t.Errorf("calibrate calls %q: want RUNS REPS WINDOW_MS SIZE, a 10 ms window", calls)
	}
	// Alone on the node: quiet only, no shift.
	one := twoAgents("1", "")
	one.Agents = one.Agents[:1]
	r, err = Qualify(context.Background(), Options{Plan: one, Launcher: f, Iterations: 1, GPU: gpu})
	if g := r.Agents[0].GPU; err != nil || g == nil || g.ShiftPercent != nil || g.LoadSkipped == "" || g.Verdict != "pass" {
		t.Errorf("one GPU: %v, %+v: want no shift, a reason, pass", err, g)
	}
	r, _ = Qualify(context.Background(), Options{Plan: twoAgents("1", "2"), Launcher: f, Iterations: 1, GPUNote: "no python3 on PATH"})
	if r.GPU != "skipped: no python3 on PATH" || r.Agents[0].GPU != nil {
		t.Errorf("without a GPU runner: %q, %+v", r.GPU, r.Agents[0].GPU)
	}
}
