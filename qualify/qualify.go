package qualify

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/noise"
)

// Default thresholds: the bare-metal goals (nvbench's default
// noise criterion is 0.5 % relative deviation; these are the numbers a
// node must reach to score).
const (
	DefaultMaxCV    = 1.0
	DefaultMaxShift = 2.0
	DefaultMaxSteal = 5.0
)

// Options configure a qualification.
type Options struct {
	Plan     *node.Plan
	Launcher Launcher
	// Runs, Reps and RepDuration size each calibration (Runs quiet and
	// Runs loaded, in Blocks alternating blocks); Iterations fixes
	// the kernel's work (0: sized here so one repetition takes about
	// RepDuration).
	Runs, Reps  int
	Blocks      int
	RepDuration time.Duration
	Iterations  int
	// MaxCV, MaxShift and MaxSteal are the verdict's thresholds (percent).
	MaxCV, MaxShift, MaxSteal float64
	// Floating gives every agent all the node's CPUs, as the seed's
	// setup did, to show what pinning buys.
	Floating bool
	// GPU, when set, adds the GPU calibration per agent (GPURunner).
	GPU *GPURunner
	// GPUNote says why there is no GPU part, for the report.
	GPUNote string
	// Settle is the wait after starting a load (0: 300 ms).
	Settle time.Duration
	// Log receives one progress line per step.
	Log io.Writer
}

// Report is the qualification of a node.
type Report struct {
	Pass       bool       `json:"pass"`
	Launcher   string     `json:"launcher"`
	Floating   bool       `json:"floating,omitempty"`
	Iterations int        `json:"iterations"`
	Thresholds Thresholds `json:"thresholds"`
	// GPU says whether the GPU part ran, and why not.
	GPU    string        `json:"gpu"`
	Agents []AgentResult `json:"agents"`
}

// Thresholds are the limits the verdicts used.
type Thresholds struct {
	MaxCV    float64 `json:"max_cv_percent"`
	MaxShift float64 `json:"max_shift_percent"`
	MaxSteal float64 `json:"max_steal_percent"`
}

// AgentResult is one agent's qualification.
type AgentResult struct {
	Name string `json:"name"`
	CPUs string `json:"cpus"`
	// CVPercent is the quiet run-to-run coefficient of variation of the
	// runs' mean times; LoadedCVPercent the same under load.
	CVPercent       float64  `json:"cv_percent"`
	LoadedCVPercent *float64 `json:"loaded_cv_percent"`
	// ShiftPercent is how much slower the loaded runs were on average;
	// null (and LoadSkipped says why) when there was nothing to load.
	ShiftPercent *float64 `json:"shift_percent"`
	LoadSkipped  string   `json:"load_skipped,omitempty"`
	// StealPercent is the worst hypervisor steal of any run.
	StealPercent float64  `json:"steal_percent"`
	QuietMeanMS  float64  `json:"quiet_mean_ms"`
	LoadedMeanMS *float64 `json:"loaded_mean_ms"`
	// PinnedCPU is the one CPU the calibration thread ran on (-1:
	// floating, --floating's unpinned thread).
	PinnedCPU int `json:"pinned_cpu"`
	// NoisyRuns counts runs whose noise record was noisy; NoiseSources
	// are the distinct reasons.
	NoisyRuns    int      `json:"noisy_runs"`
	NoiseSources []string `json:"noise_sources"`
	Verdict      Verdict  `json:"verdict"`
	Why          []string `json:"why,omitempty"`
	Error        string   `json:"error,omitempty"`
	// GPU is the GPU calibration, when it ran.
	GPU *GPUResult `json:"gpu,omitempty"`
}

func (o *Options) logf(format string, args ...any) {
	if o.Log != nil {
		fmt.Fprintf(o.Log, "kbgen node qualify: "+format+"\n", args...)
	}
}

// Qualify runs the calibration on every agent, quiet and then with every
// other agent loaded, and judges each.
func Qualify(ctx context.Context, o Options) (*Report, error) {
	if o.Plan == nil || len(o.Plan.Agents) == 0 {
		return nil, fmt.Errorf("no agents to qualify")
	}
	o.defaults()
	agents := slices.Clone(o.Plan.Agents)
	if o.Floating {
		all := allCPUs(o.Plan)
		for i := range agents {
			agents[i].CPUSet = all
		}
	}
	if o.Iterations == 0 {
		o.Iterations = IterationsFor(o.RepDuration)
	}
	r := &Report{Pass: true, Launcher: o.Launcher.Name(), Floating: o.Floating, Iterations: o.Iterations,
		Thresholds: Thresholds{MaxCV: o.MaxCV, MaxShift: o.MaxShift, MaxSteal: o.MaxSteal}, GPU: "ran"}
	if o.GPU == nil {
		r.GPU = "skipped: " + o.GPUNote
	}
	for i := range agents {
		res := o.agent(ctx, agents, i)
		if o.GPU != nil && res.Error == "" {
			res.GPU = o.qualifyGPU(ctx, agents, i)
			if res.GPU.Verdict != Pass {
				res.Verdict = Fail
				res.Why = append(res.Why, res.GPU.Why...)
			}
		}
		if res.Verdict != Pass {
			r.Pass = false
		}
		r.Agents = append(r.Agents, res)
		if err := ctx.Err(); err != nil {
			return r, err
		}
	}
	return r, nil
}

func (o *Options) defaults() {
	if o.Runs < 2 {
		o.Runs = 8
	}
	if o.Blocks < 1 {
		o.Blocks = 4
	}
	o.Blocks = min(o.Blocks, o.Runs)
	if o.Reps < 1 {
		o.Reps = 5
	}
	if o.RepDuration <= 0 {
		o.RepDuration = 12 * time.Millisecond
	}
	if o.MaxCV <= 0 {
		o.MaxCV = DefaultMaxCV
	}
	if o.MaxShift <= 0 {
		o.MaxShift = DefaultMaxShift
	}
	if o.MaxSteal <= 0 {
		o.MaxSteal = DefaultMaxSteal
	}
}

func (o *Options) calArgs(runs int) []string {
	return []string{"--runs", strconv.Itoa(runs), "--reps", strconv.Itoa(o.Reps), "--iterations", strconv.Itoa(o.Iterations)}
}

// noNeighbours is why an agent alone on its node has no loaded phase.
const noNeighbours = "no other agent on this node: nothing to load, so no shift is measured"

// agent qualifies agents[i]: a discarded warm-up, then quiet and loaded
// blocks alternating (ABAB…, the others' load started and stopped per
// block), so a slow drift of the machine (clocks, a hypervisor) falls on
// both sides instead of showing as a shift. Alone on the node, it runs
// the quiet blocks only.
func (o *Options) agent(ctx context.Context, agents []node.Agent, i int) AgentResult {
	a := agents[i]
	res := AgentResult{Name: a.ID, CPUs: a.CPUSet, NoiseSources: []string{}, PinnedCPU: -1}
	failed := func(err error) AgentResult {
		res.Verdict, res.Error = Fail, err.Error()
		return res
	}
	o.logf("%s: warm-up on CPUs %s", a.ID, a.CPUSet)
	if _, err := o.calibrate(ctx, a, 1); err != nil {
		return failed(fmt.Errorf("warm-up: %w", err))
	}
	others := slices.Delete(slices.Clone(agents), i, i+1)
	if len(others) == 0 {
		o.logf("%s: quiet calibration (%s)", a.ID, noNeighbours)
		quiet, err := o.calibrate(ctx, a, o.Runs)
		if err != nil {
			return failed(fmt.Errorf("quiet calibration: %w", err))
		}
		o.judge(&res, quiet, nil)
		return res
	}
	o.logf("%s: %d quiet and %d loaded blocks alternating, %d other agents loaded (CPU + memory bandwidth)", a.ID, o.Blocks, o.Blocks, len(others))
	quiet, loaded := &Calibration{CPU: -1}, &Calibration{CPU: -1}
	for b := range o.Blocks {
		runs := o.Runs/o.Blocks + btoi(b < o.Runs%o.Blocks)
		q, err := o.calibrate(ctx, a, runs)
		if err != nil {
			return failed(fmt.Errorf("quiet calibration: %w", err))
		}
		quiet.add(q)
		l, err := o.loadedBlock(ctx, a, others, runs)
		if err != nil {
			return failed(err)
		}
		loaded.add(l)
	}
	o.judge(&res, quiet, loaded)
	return res
}

// loadedBlock runs one calibration block with every other agent loaded.
func (o *Options) loadedBlock(ctx context.Context, a node.Agent, others []node.Agent, runs int) (*Calibration, error) {
	loadFor := time.Duration(runs*o.Reps)*o.RepDuration*4 + time.Minute
	var stops []func()
	defer func() {
		for _, s := range stops {
			s()
		}
	}()
	for _, other := range others {
		stop, err := o.Launcher.StartLoad(ctx, other, loadFor)
		if err != nil {
			return nil, fmt.Errorf("starting the load on %s: %w", other.ID, err)
		}
		stops = append(stops, stop)
	}
	time.Sleep(o.settle()) // let the load reach its stride
	c, err := o.calibrate(ctx, a, runs)
	if err != nil {
		return nil, fmt.Errorf("loaded calibration: %w", err)
	}
	return c, nil
}

// settle is the wait between starting a load and measuring under it.
func (o *Options) settle() time.Duration {
	if o.Settle > 0 {
		return o.Settle
	}
	return 300 * time.Millisecond
}

// add appends another block's runs.
func (c *Calibration) add(b *Calibration) {
	c.Iterations, c.CPU = b.Iterations, b.CPU
	c.Runs = append(c.Runs, b.Runs...)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (o *Options) calibrate(ctx context.Context, a node.Agent, runs int) (*Calibration, error) {
	out, err := o.Launcher.Calibrate(ctx, a, o.calArgs(runs))
	if err != nil {
		return nil, err
	}
	var c Calibration
	if err := json.Unmarshal(out, &c); err != nil {
		return nil, fmt.Errorf("the calibration printed no result (%v): %q", err, firstLine(string(out)))
	}
	if len(c.Runs) == 0 {
		return nil, fmt.Errorf("the calibration returned no runs")
	}
	return &c, nil
}

// judge fills the numbers and the verdict; loaded nil means there was
// no loaded phase (no neighbour), so no shift and no shift verdict.
func (o *Options) judge(res *AgentResult, quiet, loaded *Calibration) {
	q := means(quiet)
	res.QuietMeanMS, res.CVPercent, res.PinnedCPU = round3(mean(q)), round2(cv(q)), quiet.CPU
	all := quiet.Runs
	if loaded == nil {
		res.LoadSkipped = noNeighbours
	} else {
		l := means(loaded)
		lm, lcv, shift := round3(mean(l)), round2(cv(l)), round2(100*(mean(l)-mean(q))/mean(q))
		res.LoadedMeanMS, res.LoadedCVPercent, res.ShiftPercent = &lm, &lcv, &shift
		all = slices.Concat(quiet.Runs, loaded.Runs)
	}
	seen := map[string]bool{}
	for _, run := range all {
		res.StealPercent = max(res.StealPercent, run.StealPercent)
		if run.Verdict == noise.Noisy {
			res.NoisyRuns++
		}
		for _, why := range run.Reasons {
			src := reasonSource(why)
			if !seen[src] {
				seen[src] = true
				res.NoiseSources = append(res.NoiseSources, src)
			}
		}
	}
	if res.CVPercent > o.MaxCV {
		res.Why = append(res.Why, fmt.Sprintf("quiet CV %.2f %% > %g %%", res.CVPercent, o.MaxCV))
	}
	if res.ShiftPercent != nil && math.Abs(*res.ShiftPercent) > o.MaxShift {
		res.Why = append(res.Why, fmt.Sprintf("shift under load %+.2f %% beyond ±%g %%", *res.ShiftPercent, o.MaxShift))
	}
	if res.StealPercent > o.MaxSteal {
		res.Why = append(res.Why, fmt.Sprintf("steal up to %.1f %% > %g %%", res.StealPercent, o.MaxSteal))
	}
	res.Verdict = verdictOf(res.Why)
}

// reasonSource shortens a noise reason to its kind for the table.
func reasonSource(msg string) string {
	for _, k := range []string{"hypervisor steal", "foreign processes", "throttled", "other compute processes", "ECC", "slowed before", "clock events", "clock-event counters"} {
		if strings.Contains(msg, k) {
			return k
		}
	}
	return msg
}

func means(c *Calibration) []float64 {
	out := make([]float64, len(c.Runs))
	for i, r := range c.Runs {
		out[i] = r.MeanMS
	}
	return out
}

// allCPUs is every CPU of the plan: the agents' and the host's.
func allCPUs(p *node.Plan) string {
	var all []int
	for _, s := range append([]string{p.HostCPUs}, cpusets(p)...) {
		l, err := cpulist.Parse(s)
		if err == nil {
			all = append(all, l...)
		}
	}
	slices.Sort(all)
	return cpulist.Format(slices.Compact(all))
}

func cpusets(p *node.Plan) []string {
	var out []string
	for _, a := range p.Agents {
		out = append(out, a.CPUSet)
	}
	return out
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return s
}
