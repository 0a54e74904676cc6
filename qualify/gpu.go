package qualify

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/noise"
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
	Device          string   `json:"device,omitempty"`
	CVPercent       float64  `json:"cv_percent"`
	LoadedCVPercent float64  `json:"loaded_cv_percent"`
	ShiftPercent    float64  `json:"shift_percent"`
	QuietMeanMS     float64  `json:"quiet_mean_ms"`
	LoadedMeanMS    float64  `json:"loaded_mean_ms"`
	NoiseSources    []string `json:"noise_sources"`
	Verdict         string   `json:"verdict"`
	Why             []string `json:"why,omitempty"`
}

type gpuCalibration struct {
	Device string `json:"device"`
	Runs   []Run  `json:"runs"`
}

// GPURunner runs the GPU calibration on an agent's GPU: a host python3
// with torch, the GPU chosen by CUDA_VISIBLE_DEVICES (the --no-sandbox
// path; the runner images' torch would serve the sandbox path, not wired
// yet).
type GPURunner struct {
	Python string
	// Env is the environment the GPU tools (nvidia-smi) run with.
	Env []string
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
	return &GPURunner{Python: py, Env: os.Environ()}, ""
}

func (g *GPURunner) cmd(ctx context.Context, a node.Agent, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, g.Python, append([]string{"-c", gpuScript}, args...)...)
	cmd.Env = append(slices.Clone(g.Env), "CUDA_VISIBLE_DEVICES="+a.GPU.UUID, "HIP_VISIBLE_DEVICES=0")
	return cmd
}

func (g *GPURunner) calibrate(ctx context.Context, a node.Agent, runs, reps int) (*gpuCalibration, []string, error) {
	s := noise.NewSampler(noise.Config{Env: g.Env, GPU: a.GPU.UUID, CPUs: []int{}})
	s.Begin("benchmark")
	out, err := run(g.cmd(ctx, a, "calibrate", strconv.Itoa(runs), strconv.Itoa(reps), strconv.Itoa(GPUMatrixSize)))
	s.End("benchmark")
	if err != nil {
		return nil, nil, err
	}
	var c gpuCalibration
	if err := json.Unmarshal(out, &c); err != nil || len(c.Runs) == 0 {
		return nil, nil, fmt.Errorf("the GPU calibration printed no result: %q", firstLine(string(out)))
	}
	var reasons []string
	for _, r := range s.Record(noise.Policy{}).Reasons {
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

// qualifyGPU measures agents[i]'s GPU quiet and with every other GPU
// busy.
func (o *Options) qualifyGPU(ctx context.Context, agents []node.Agent, i int) *GPUResult {
	a := agents[i]
	res := &GPUResult{NoiseSources: []string{}}
	fail := func(err error) *GPUResult {
		res.Verdict, res.Why = "fail", []string{err.Error()}
		return res
	}
	if a.GPU.UUID == "" {
		return fail(errors.New("the plan names no GPU UUID for this agent"))
	}
	o.logf("%s: GPU calibration (%dx%d fp16 matmul) quiet", a.ID, GPUMatrixSize, GPUMatrixSize)
	quiet, qr, err := o.GPU.calibrate(ctx, a, o.Runs, o.Reps*4)
	if err != nil {
		return fail(fmt.Errorf("quiet: %w", err))
	}
	var stops []func()
	for j, other := range agents {
		if j != i && other.GPU.UUID != "" {
			if stop, err := o.GPU.startLoad(other, 10*time.Minute); err == nil {
				stops = append(stops, stop)
			}
		}
	}
	if len(stops) > 0 {
		o.logf("%s: GPU calibration with %d other GPUs busy", a.ID, len(stops))
		time.Sleep(2 * time.Second)
	}
	loaded, lr, err := o.GPU.calibrate(ctx, a, o.Runs, o.Reps*4)
	for _, s := range stops {
		s()
	}
	if err != nil {
		return fail(fmt.Errorf("loaded: %w", err))
	}
	q, l := means(&Calibration{Runs: quiet.Runs}), means(&Calibration{Runs: loaded.Runs})
	res.Device = quiet.Device
	res.QuietMeanMS, res.LoadedMeanMS = round3(mean(q)), round3(mean(l))
	res.CVPercent, res.LoadedCVPercent = round2(cv(q)), round2(cv(l))
	res.ShiftPercent = round2(100 * (mean(l) - mean(q)) / mean(q))
	for _, why := range slices.Concat(qr, lr) {
		if src := reasonSource(why); !slices.Contains(res.NoiseSources, src) {
			res.NoiseSources = append(res.NoiseSources, src)
		}
	}
	if res.CVPercent > o.MaxCV {
		res.Why = append(res.Why, fmt.Sprintf("GPU quiet CV %.2f %% > %g %%", res.CVPercent, o.MaxCV))
	}
	if res.ShiftPercent > o.MaxShift || res.ShiftPercent < -o.MaxShift {
		res.Why = append(res.Why, fmt.Sprintf("GPU shift under load %+.2f %% beyond ±%g %%", res.ShiftPercent, o.MaxShift))
	}
	res.Verdict = "pass"
	if len(res.Why) > 0 {
		res.Verdict = "fail"
	}
	return res
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}
