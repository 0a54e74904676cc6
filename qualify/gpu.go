package qualify

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// gpuScript is the GPU calibration: fp16 matmuls timed with CUDA events.
//
//go:embed gpu_calibrate.py
var gpuScript string

// GPUMatrixSize is the calibration matmul's size (n×n fp16): 0.2 ms on
// the lent H100. 8192 (1.7 ms) was steadier in theory but ran back to back
// into the power cap there (CV 4.7–6.4 % against 1.2–3.0 %), which measures
// the kernel's own heat rather than the node's noise.
const GPUMatrixSize = 4096

// GPUResult is one agent's GPU qualification.
type GPUResult struct {
	Device string `json:"device,omitempty"`
	// MatmulsPerSample is how many matmuls one CUDA-event pair timed (a
	// window of about GPUWindow); the times are per matmul.
	MatmulsPerSample int      `json:"matmuls_per_sample"`
	CVPercent        float64  `json:"cv_percent"`
	LoadedCVPercent  *float64 `json:"loaded_cv_percent"`
	// ShiftPercent is null (LoadSkipped says why) with no other GPU.
	ShiftPercent *float64 `json:"shift_percent"`
	LoadSkipped  string   `json:"load_skipped,omitempty"`
	QuietMeanMS  float64  `json:"quiet_mean_ms"`
	LoadedMeanMS *float64 `json:"loaded_mean_ms"`
	NoiseSources []string `json:"noise_sources"`
	// Set is a multi-GPU agent's other GPUs, each measured as the first
	// (Device to Why); P2P its peer-to-peer check (p2p.go).
	Set     []*GPUResult `json:"set,omitempty"`
	P2P     *P2PResult   `json:"p2p,omitempty"`
	Verdict Verdict      `json:"verdict"`
	Why     []string     `json:"why,omitempty"`
}

type gpuCalibration struct {
	Device           string `json:"device"`
	MatmulsPerSample int    `json:"matmuls_per_sample"`
	Runs             []Run  `json:"runs"`
}

// GPUWindow is what one CUDA-event pair times: a 4096² matmul takes
// 0.2 ms on an H100, where timing single launches measured launch jitter
// (CV 0.8-3.5 %); a window of many back-to-back matmuls does not.
const GPUWindow = 10 * time.Millisecond

// GPUBlocks is how many quiet/loaded block pairs the GPU part alternates
// (each block is a python process: torch's import costs seconds).
const GPUBlocks = 2

// GPURunner runs the GPU calibration on an agent's GPU: a host python3
// with torch, the GPU chosen by CUDA_VISIBLE_DEVICES (the --no-sandbox
// path; the runner images' torch would serve the sandbox path, not wired
// yet).
type GPURunner struct {
	Python string
	// Env is the environment the GPU tools (nvidia-smi) run with.
	Env []string
	// NVML is the kbgen-nvml beside this kbgen, which the calibration's
	// noise record reads the GPU through (as a job's would), or why none.
	NVML nvmlhelper.Location
}

// FindGPURunner returns a runner when python3 can import torch and see a
// GPU, else why not.
func FindGPURunner(ctx context.Context) (*GPURunner, string) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, "no python3 on PATH"
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, py, "-c", "import torch; print(torch.cuda.is_available())").CombinedOutput()
	if err != nil {
		return nil, "python3 cannot import torch: " + lastLine(string(out))
	}
	if firstLine(string(out)) != "True" {
		return nil, "torch sees no GPU"
	}
	self, _ := os.Executable()
	return &GPURunner{Python: py, Env: os.Environ(), NVML: nvmlhelper.Locate(contract.EnvironLookup(os.Environ()), self)}, ""
}

func (g *GPURunner) cmd(ctx context.Context, a node.Agent, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.Python, append([]string{"-c", gpuScript}, args...)...)
	cmd.Env = append(slices.Clone(g.Env), "CUDA_VISIBLE_DEVICES="+a.GPU.UUID, "HIP_VISIBLE_DEVICES=0")
	return cmd
}

func (g *GPURunner) calibrate(ctx context.Context, a node.Agent, runs, reps int) (*gpuCalibration, []string, error) {
	s := noise.NewSampler(noise.Config{Env: g.Env, GPU: a.GPU.UUID, CPUs: []int{}, NVML: g.NVML})
	defer s.Close()
	s.Begin("benchmark")
	out, err := run(g.cmd(ctx, a, "calibrate", strconv.Itoa(runs), strconv.Itoa(reps), strconv.Itoa(int(GPUWindow/time.Millisecond)), strconv.Itoa(GPUMatrixSize)))
	s.End("benchmark")
	if err != nil {
		return nil, nil, err
	}
	var c gpuCalibration
	if err := json.Unmarshal(out, &c); err != nil || len(c.Runs) == 0 {
		return nil, nil, fmt.Errorf("the GPU calibration printed no result: %q", firstLine(string(out)))
	}
	var reasons []string
	for _, r := range s.Record(noisepolicy.Policy{}).Reasons {
		if r.Source == "nvidia" {
			reasons = append(reasons, r.Message)
		}
	}
	return &c, reasons, nil
}

func (g *GPURunner) startLoad(a node.Agent, d time.Duration) (func(), error) {
	cmd := g.cmd(context.Background(), a, "load", strconv.Itoa(int(d.Seconds())), strconv.Itoa(GPUMatrixSize))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() }, nil
}

// qualifyGPU measures agents[i]'s GPU, or each GPU of a multi-GPU
// agent's set, and adds a set's peer-to-peer check. The agent's result
// is its first GPU's, with Set holding the others' and Why every
// GPU's reasons.
func (o *Options) qualifyGPU(ctx context.Context, agents []node.Agent, i int) *GPUResult {
	a := agents[i]
	others := loadTargets(agents, a)
	res := o.calibrateGPU(ctx, a, others)
	for _, g := range a.GPUs[min(1, len(a.GPUs)):] {
		one := a
		one.GPU = g
		r := o.calibrateGPU(ctx, one, others)
		res.Set = append(res.Set, r)
		for _, why := range r.Why {
			res.Why = append(res.Why, g.UUID+": "+why)
		}
	}
	if len(a.GPUs) > 1 {
		res.P2P = o.qualifyP2P(ctx, a)
		res.Why = append(res.Why, res.P2P.Why...)
	}
	res.Verdict = verdictOf(res.Why)
	return res
}

// loadTargets are one agent per GPU outside a's own GPUs: what the
// loaded blocks keep busy. A node with multi-GPU agents has several
// agents per GPU; loading one of a's own GPUs would measure a's own load.
func loadTargets(agents []node.Agent, a node.Agent) []node.Agent {
	seen := map[string]bool{}
	for _, g := range append([]node.GPU{a.GPU}, a.GPUs...) {
		seen[g.UUID] = true
	}
	var out []node.Agent
	for _, other := range agents {
		for _, g := range append([]node.GPU{other.GPU}, other.GPUs...) {
			if g.UUID == "" || seen[g.UUID] {
				continue
			}
			seen[g.UUID] = true
			one := other
			one.GPU, one.GPUs = g, nil
			out = append(out, one)
		}
	}
	return out
}

// calibrateGPU measures a.GPU quiet and with others busy, in alternating
// blocks (the loads started and stopped per block); with no other GPU,
// quiet only.
func (o *Options) calibrateGPU(ctx context.Context, a node.Agent, others []node.Agent) *GPUResult {
	res := &GPUResult{NoiseSources: []string{}}
	fail := func(err error) *GPUResult {
		res.Verdict, res.Why = Fail, []string{err.Error()}
		return res
	}
	if a.GPU.UUID == "" {
		return fail(errors.New("the plan names no GPU UUID for this agent"))
	}
	blocks, samples := GPUBlocks, o.Reps*4
	if len(others) == 0 {
		blocks = 1
		res.LoadSkipped = "no GPU on this node outside this agent's: nothing to load, so no shift is measured"
	}
	o.logf("%s: GPU calibration of %s (%dx%d fp16 matmuls, %s per timed window), %d block(s), %d other GPUs loaded", a.ID, a.GPU.UUID, GPUMatrixSize, GPUMatrixSize, GPUWindow, blocks, len(others))
	var quiet, loaded []Run
	var reasons []string
	for b := range blocks {
		runs := o.Runs/blocks + btoi(b < o.Runs%blocks)
		q, qr, err := o.GPU.calibrate(ctx, a, runs, samples)
		if err != nil {
			return fail(fmt.Errorf("quiet: %w", err))
		}
		res.Device, res.MatmulsPerSample = q.Device, q.MatmulsPerSample
		quiet, reasons = append(quiet, q.Runs...), append(reasons, qr...)
		if len(others) == 0 {
			continue
		}
		l, lr, err := o.gpuLoadedBlock(ctx, a, others, runs, samples)
		if err != nil {
			return fail(fmt.Errorf("loaded: %w", err))
		}
		loaded, reasons = append(loaded, l.Runs...), append(reasons, lr...)
	}
	q := means(&Calibration{Runs: quiet})
	res.QuietMeanMS, res.CVPercent = round4(mean(q)), round2(cv(q))
	if len(loaded) > 0 {
		l := means(&Calibration{Runs: loaded})
		lm, lcv, shift := round4(mean(l)), round2(cv(l)), round2(100*(mean(l)-mean(q))/mean(q))
		res.LoadedMeanMS, res.LoadedCVPercent, res.ShiftPercent = &lm, &lcv, &shift
	}
	for _, why := range reasons {
		if src := reasonSource(why); !slices.Contains(res.NoiseSources, src) {
			res.NoiseSources = append(res.NoiseSources, src)
		}
	}
	if res.CVPercent > o.MaxCV {
		res.Why = append(res.Why, fmt.Sprintf("GPU quiet CV %.2f %% > %g %%", res.CVPercent, o.MaxCV))
	}
	if s := res.ShiftPercent; s != nil && (*s > o.MaxShift || *s < -o.MaxShift) {
		res.Why = append(res.Why, fmt.Sprintf("GPU shift under load %+.2f %% beyond ±%g %%", *s, o.MaxShift))
	}
	res.Verdict = verdictOf(res.Why)
	return res
}

// gpuLoadedBlock runs one GPU calibration block with the other GPUs busy.
func (o *Options) gpuLoadedBlock(ctx context.Context, a node.Agent, others []node.Agent, runs, samples int) (*gpuCalibration, []string, error) {
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	for _, other := range others {
		stop, err := o.GPU.startLoad(other, 10*time.Minute)
		if err != nil {
			return nil, nil, fmt.Errorf("starting the GPU load on %s: %w", other.ID, err)
		}
		stops = append(stops, stop)
	}
	time.Sleep(o.gpuSettle()) // torch's import, then the load's stride
	return o.GPU.calibrate(ctx, a, runs, samples)
}

func (o *Options) gpuSettle() time.Duration {
	if o.Settle > 0 {
		return o.Settle
	}
	return 3 * time.Second
}

func round4(f float64) float64 { return math.Round(f*10000) / 10000 }

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
