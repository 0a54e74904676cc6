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

	"github.com/gpu-mode/kbgen/node"
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
	// Runs, Reps and RepDuration size each calibration; Iterations fixes
	// the kernel's work (0: sized here so one repetition takes about
	// RepDuration).
	Runs, Reps  int
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
	CVPercent       float64 `json:"cv_percent"`
	LoadedCVPercent float64 `json:"loaded_cv_percent"`
	// ShiftPercent is how much slower the loaded runs were on average.
	ShiftPercent float64 `json:"shift_percent"`
	// StealPercent is the worst hypervisor steal of any run.
	StealPercent float64 `json:"steal_percent"`
	QuietMeanMS  float64 `json:"quiet_mean_ms"`
	LoadedMeanMS float64 `json:"loaded_mean_ms"`
	// NoisyRuns counts runs whose noise record was noisy; NoiseSources
	// are the distinct reasons.
	NoisyRuns    int      `json:"noisy_runs"`
	NoiseSources []string `json:"noise_sources"`
	Verdict      string   `json:"verdict"`
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
			if res.GPU.Verdict != "pass" {
				res.Verdict = "fail"
				res.Why = append(res.Why, res.GPU.Why...)
			}
		}
		if res.Verdict != "pass" {
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

func (o *Options) calArgs() []string {
	return []string{"--runs", strconv.Itoa(o.Runs), "--reps", strconv.Itoa(o.Reps), "--iterations", strconv.Itoa(o.Iterations)}
}

// agent qualifies agents[i]: quiet, then with the others loaded.
func (o *Options) agent(ctx context.Context, agents []node.Agent, i int) AgentResult {
	a := agents[i]
	res := AgentResult{Name: a.ID, CPUs: a.CPUSet, NoiseSources: []string{}}
	failed := func(err error) AgentResult {
		res.Verdict, res.Error = "fail", err.Error()
		return res
	}
	o.logf("%s: quiet calibration on CPUs %s", a.ID, a.CPUSet)
	quiet, err := o.calibrate(ctx, a)
	if err != nil {
		return failed(fmt.Errorf("quiet calibration: %w", err))
	}
	var stops []func()
	loadFor := time.Duration(o.Runs*o.Reps)*o.RepDuration*4 + 2*time.Minute
	for j, other := range agents {
		if j == i {
			continue
		}
		stop, err := o.Launcher.StartLoad(ctx, other, loadFor)
		if err != nil {
			for _, s := range stops {
				s()
			}
			return failed(fmt.Errorf("starting the load on %s: %w", other.ID, err))
		}
		stops = append(stops, stop)
	}
	o.logf("%s: calibration with %d other agents loaded (CPU + memory bandwidth)", a.ID, len(stops))
	time.Sleep(500 * time.Millisecond) // let the load reach its stride
	loaded, err := o.calibrate(ctx, a)
	for _, s := range stops {
		s()
	}
	if err != nil {
		return failed(fmt.Errorf("loaded calibration: %w", err))
	}
	o.judge(&res, quiet, loaded)
	return res
}

func (o *Options) calibrate(ctx context.Context, a node.Agent) (*Calibration, error) {
	out, err := o.Launcher.Calibrate(ctx, a, o.calArgs())
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

// judge fills the numbers and the verdict.
func (o *Options) judge(res *AgentResult, quiet, loaded *Calibration) {
	q, l := means(quiet), means(loaded)
	res.QuietMeanMS, res.LoadedMeanMS = round3(mean(q)), round3(mean(l))
	res.CVPercent, res.LoadedCVPercent = round2(cv(q)), round2(cv(l))
	res.ShiftPercent = round2(100 * (mean(l) - mean(q)) / mean(q))
	seen := map[string]bool{}
	for _, run := range slices.Concat(quiet.Runs, loaded.Runs) {
		res.StealPercent = max(res.StealPercent, run.StealPercent)
		if run.Verdict == "noisy" {
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
	if math.Abs(res.ShiftPercent) > o.MaxShift {
		res.Why = append(res.Why, fmt.Sprintf("shift under load %+.2f %% beyond ±%g %%", res.ShiftPercent, o.MaxShift))
	}
	if res.StealPercent > o.MaxSteal {
		res.Why = append(res.Why, fmt.Sprintf("steal up to %.1f %% > %g %%", res.StealPercent, o.MaxSteal))
	}
	res.Verdict = "pass"
	if len(res.Why) > 0 {
		res.Verdict = "fail"
	}
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
		l, err := ParseCPUs(s)
		if err == nil {
			all = append(all, l...)
		}
	}
	slices.Sort(all)
	return node.CPUList(slices.Compact(all)).String()
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
