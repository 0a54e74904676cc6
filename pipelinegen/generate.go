package pipelinegen

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/imageref"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/steps"
)

// Job is one Kernelbot submission as the bootstrap step sees it: the job
// itself plus the build env that came with it. Every string here is
// untrusted.
type Job struct {
	Input    *payload.Input
	RunID    string
	Queue    string
	Image    string // KERNELBOT_IMAGE override; "" for the vendor's image
	Priority string // KERNELBOT_PRIORITY override, as text from the env
	User     string // KERNELBOT_USER, the fair-share key
	Agent    string // KBGEN_TARGET_AGENT: one agent's name, "" for any of the queue
}

// Options are the generator's knobs that come from kbgen's operator, not
// from the job.
type Options struct {
	// UserConcurrency is how many eval steps one user may run at once on a
	// queue (default 1).
	UserConcurrency int
	// GeneratorVersion is the generating kbgen's version, put in the eval
	// step's env as contract.EnvGeneratorVersion; "" leaves it out.
	GeneratorVersion string
}

// Per-run budget Kernelbot spends before the evaluated program starts: the
// py warm-up run or the nvcc compile, each capped at 120 s.
const compileSeconds = 120

// Priorities: ranked runs first, then everything else. Buildkite runs
// higher numbers first.
const (
	PriorityRanked  = 10
	PriorityDefault = 0
	// The range a build's KERNELBOT_PRIORITY may ask for, and its lowest
	// (kbgen serve's canaries), are the submitter's contract too:
	// internal/contract, so serve need not link the generator.
	maxPriority = contract.PriorityMax
)

// agentName is a name an agent tag can carry: a host name and an agent id
// (deployment/agent/buildkite-agent.cfg.tmpl), nothing YAML or a tag list
// could read as structure.
var agentName = lazyre.New(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// maxAgentName bounds an agent name (checked beside agentName).
const maxAgentName = 128

// EvalFor decides the eval step for job on vendor v, as typed fields
// (queue, timeout, priority, plugin config, env): what Generate emits and
// what `kbgen local` runs under. A job or build env
// it cannot run (a bad KERNELBOT_PRIORITY or KERNELBOT_IMAGE, more GPUs
// than the queue gives, a run id that is not UTF-8, a timeout beyond the
// vendor's) is a *payload.Error: the job's fault, never retried.
func EvalFor(job Job, v *registry.Vendor, opts Options) (*steps.Eval, error) {
	if job.Input == nil || job.Input.Config == nil {
		return nil, errors.New("generate: no job")
	}
	cfg := job.Input.Config
	for name, val := range map[string]string{contract.EnvRunID: job.RunID, contract.EnvUser: job.User} {
		// YAML would turn bad bytes into U+FFFD: the step would carry
		// another run id than the one Kernelbot asked about.
		if !utf8.ValidString(val) {
			return nil, &payload.Error{Kind: payload.KindInvalidField, Field: name, Msg: "not valid UTF-8"}
		}
		// yaml.v3 writes a string that starts with a newline as a literal
		// block and drops that newline on reading (found by FuzzGenerate).
		if strings.HasPrefix(val, "\n") {
			return nil, fmt.Errorf("%s starts with a newline", name)
		}
	}
	if err := checkShape(cfg, v); err != nil {
		return nil, err
	}
	image := v.Image
	if job.Image != "" {
		if _, err := imageref.Parse(job.Image); err != nil {
			return nil, &payload.Error{Kind: payload.KindInvalidField, Field: contract.EnvImage, Msg: err.Error()}
		}
		image = job.Image
	}
	priority, err := stepPriority(cfg.Mode, job.Priority)
	if err != nil {
		return nil, err
	}
	if job.Agent != "" && (len(job.Agent) > maxAgentName || !agentName.MatchString(job.Agent)) {
		return nil, &payload.Error{Kind: payload.KindInvalidField, Field: contract.EnvTargetAgent,
			Msg: fmt.Sprintf("%q is not an agent name (letters, digits, '.', '_', '-'; at most 128)", job.Agent)}
	}
	timeout, err := StepTimeoutMinutes(cfg, v)
	if err != nil {
		return nil, err
	}
	// checkShape matched the job to the queue: a step gets all of its GPUs.
	gpus := v.Resources.GPUs
	runLabel := ""
	if job.RunID != "" {
		runLabel = " · " + steps.Escape(job.RunID)
	}
	env := map[string]string{contract.EnvQueue: v.Queue}
	if job.RunID != "" {
		env[contract.EnvRunID] = steps.Escape(job.RunID)
	}
	if v.Noise != nil {
		env[contract.EnvNoisePolicy] = v.Noise.String()
	}
	if opts.GeneratorVersion != "" {
		env[contract.EnvGeneratorVersion] = steps.Escape(opts.GeneratorVersion)
	}
	eval := steps.Eval{
		Label: fmt.Sprintf("%s %s %s · %s%s", v.Emoji(), v.Donor, v.ShapeName(), cfg.Mode, runLabel),
		Queue: v.Queue,
		Plugin: plugincfg.GPUDocker{
			Image:     image,
			Runtime:   v.Runtime,
			GPUs:      gpus,
			CPUs:      v.Resources.CPUs,
			Memory:    v.Resources.Memory,
			ShmSize:   v.Resources.ShmSize,
			PidsLimit: v.Resources.PidsLimit,
			Network:   "none",
		},
		Env:            env,
		TimeoutMinutes: timeout,
		Priority:       priority,
		Agent:          job.Agent,
		Kubernetes:     v.Backend == registry.BackendKubernetes,
	}
	if job.User != "" {
		eval.ConcurrencyGroup = "kernelbot/" + v.Queue + "/user/" + concurrencyKey(job.User)
		eval.Concurrency = max(opts.UserConcurrency, 1)
	}
	return &eval, nil
}

// checkShape refuses a job the queue's shape cannot run, naming the
// queue that can: a multi_gpu job on a one-GPU queue (it would see one
// GPU), a one-GPU job on a multi-GPU queue (it would hold N-1 GPUs idle),
// a case whose world_size exceeds the queue's GPUs (Kernelbot's
// multi-GPU harness starts world_size processes, one per GPU:
// gpu-mode/kernelbot examples/*/eval.py run_multi_gpu_benchmark, with
// POPCORN_GPUS from run_eval.py's run_program), and a mode the queue
// does not run (a MIG queue runs test only).
func checkShape(cfg *payload.Config, v *registry.Vendor) error {
	refuse := func(field, msg string, others []string) error {
		if len(others) > 0 {
			msg += "; use " + strings.Join(others, " or ")
		}
		return &payload.Error{Kind: payload.KindInvalidField, Field: field, Msg: msg}
	}
	if !v.RunsMode(cfg.Mode) {
		return refuse("mode", fmt.Sprintf("queue %q runs only %s jobs, not %s", v.Queue, modeNames(v.Modes), cfg.Mode), v.ShapesFor(cfg.MultiGPU, cfg.Mode))
	}
	if cfg.MultiGPU && !v.MultiGPU() {
		return refuse("multi_gpu", fmt.Sprintf("the job asks for multiple GPUs but queue %q gives each step %d", v.Queue, v.Resources.GPUs), v.ShapesFor(true, cfg.Mode))
	}
	if !cfg.MultiGPU && v.MultiGPU() {
		return refuse("multi_gpu", fmt.Sprintf("queue %q gives each step %d GPUs and takes only multi_gpu jobs; a one-GPU job would hold %d idle", v.Queue, v.Resources.GPUs, v.Resources.GPUs-1), v.ShapesFor(false, cfg.Mode))
	}
	if !cfg.MultiGPU {
		return nil
	}
	if cfg.Mode == payload.ModeProfile && v.Runtime == contract.RuntimeNVIDIA {
		// run_eval.py's profile_program_ncu asserts not multi_gpu; the
		// runner refuses it too (runner/profile.go), but only after the
		// step has held N GPUs.
		return refuse("multi_gpu", "multi-GPU profiling is not supported with ncu (rocprofv3 on an AMD multi-GPU queue is)", nil)
	}
	for _, group := range []struct {
		name  string
		cases []payload.Case
	}{{"tests", cfg.Tests}, {"benchmarks", cfg.Benchmarks}} {
		for i, c := range group.cases {
			ws, ok := c.Get("world_size")
			if !ok {
				continue
			}
			n, err := strconv.Atoi(ws.String())
			if err != nil || n < 1 {
				return refuse(group.name, fmt.Sprintf("case %d: world_size %q is not a positive integer", i, ws.String()), nil)
			}
			if n > v.Resources.GPUs {
				return refuse(group.name, fmt.Sprintf("case %d: world_size %d, but queue %q gives each step %d GPUs", i, n, v.Queue, v.Resources.GPUs), nil)
			}
		}
	}
	return nil
}

func modeNames(ms []payload.Mode) string {
	names := make([]string, len(ms))
	for i, m := range ms {
		names[i] = string(m)
	}
	return strings.Join(names, ", ")
}

// Generate builds the pipeline for job on vendor v: the one eval step
// EvalFor decides. Its errors are EvalFor's.
func Generate(job Job, v *registry.Vendor, opts Options) (*pipeline.Pipeline, error) {
	eval, err := EvalFor(job, v, opts)
	if err != nil {
		return nil, err
	}
	step, err := eval.CommandStep()
	if err != nil {
		return nil, err
	}
	return &pipeline.Pipeline{Steps: pipeline.Steps{step}}, nil
}

// StepTimeoutMinutes is the job's own worst case (each run's warm-up or
// compile plus its mode timeout) plus the vendor's start-up margin, rounded
// up. A job that needs more than the vendor allows is refused rather than
// killed half-way.
func StepTimeoutMinutes(cfg *payload.Config, v *registry.Vendor) (int, error) {
	secs := 0
	for _, run := range cfg.RunModes() {
		secs += compileSeconds + int(cfg.ModeTimeout(run).Seconds())
	}
	minutes := int(math.Ceil(float64(secs)/60)) + v.Timeouts.StartupMinutes
	if minutes > v.Timeouts.MaxMinutes {
		return 0, &payload.Error{Kind: payload.KindInvalidField, Field: "timeouts",
			Msg: fmt.Sprintf("the job needs %d minutes but queue %q allows at most %d", minutes, v.Queue, v.Timeouts.MaxMinutes)}
	}
	return minutes, nil
}

func stepPriority(mode payload.Mode, override string) (int, error) {
	if override != "" {
		p, err := strconv.Atoi(override)
		if err != nil || p < -maxPriority || p > maxPriority {
			return 0, &payload.Error{Kind: payload.KindInvalidField, Field: contract.EnvPriority,
				Msg: fmt.Sprintf("%q is not an integer from %d to %d", override, -maxPriority, maxPriority)}
		}
		return p, nil
	}
	if mode.Ranked() {
		return PriorityRanked, nil
	}
	return PriorityDefault, nil
}

// safeKey is at most 64 characters (checked beside it): a counted
// repetition would compile to 64 nested states at every start-up.
var safeKey = lazyre.New(`^[A-Za-z0-9._-]+$`)

// concurrencyKey makes a user id safe to use in a concurrency group name:
// plain ids are kept readable; anything else becomes a hash, so no user
// text reaches the pipeline unescaped.
func concurrencyKey(user string) string {
	if len(user) <= 64 && safeKey.MatchString(user) {
		return user
	}
	sum := sha256.Sum256([]byte(user))
	return "sha256-" + hex.EncodeToString(sum[:8])
}

// EvalStep finds the eval step of a generated pipeline.
func EvalStep(p *pipeline.Pipeline) (*pipeline.CommandStep, error) {
	for _, s := range p.Steps {
		if cs, ok := s.(*pipeline.CommandStep); ok && cs.Key == contract.EvalStepKey {
			return cs, nil
		}
	}
	return nil, errors.New("pipeline has no eval step")
}

// NoJobPipeline is what generate emits when the build carries no job (an
// ordinary push to the repo): a lone wait step, which needs no agent and
// succeeds at once, because the agent refuses a pipeline with no steps.
func NoJobPipeline() *pipeline.Pipeline {
	return &pipeline.Pipeline{Steps: pipeline.Steps{&pipeline.WaitStep{
		Contents: map[string]any{"wait": nil, "key": "no-kernelbot-job"},
	}}}
}
