package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/nvmlhelper"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/gpuhealth"
	"github.com/gpu-mode/kbgen/sandbox/lease"
	"github.com/gpu-mode/kbgen/sandbox/process"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/seal"
)

// Request is how `kbgen sandbox` was asked to run, besides the
// environment.
type Request struct {
	// Command is the step's command (BUILDKITE_COMMAND, split).
	Command []string
	// StageDir is where the stage goes; "" picks StageBase's default.
	StageDir string
	// RunnerBinary is the static kbgen to mount; "" means this program.
	RunnerBinary string
	// NoGPU leaves out the GPU flags (tests; also KBGEN_SANDBOX_NO_GPU=1).
	NoGPU bool
	// Host is the machine; the zero value means LocalHost().
	Host *dockerargv.Host
	// Launcher is LauncherDocker ("" too) or LauncherProcess.
	Launcher string
	// User is the process launcher's "UID:GID"; "" means ContainerUser.
	User string
	// WorkDir is the process launcher's working directory; "" means
	// ContainerWorkDir.
	WorkDir string
	// Protect are the directories the process launcher makes root's
	// alone before it starts the step (process.Spec.Protect).
	Protect []string
}

// Job is one planned container run: the argv, its stage and the payload.
type Job struct {
	Spec    *dockerargv.Spec
	Stage   Stage
	Runner  string
	payload string
	// policy is the queue's noise policy (contract.EnvNoisePolicy), which
	// judges the host section of noise.json.
	policy noisepolicy.Policy
	// procRoot is /proc ("" means /proc); tests point it at a fixture.
	procRoot string
	// lease is where and how long the job waits for its GPUs (package lease).
	lease lease.Options
	// check is the clean-GPU check of the leased GPUs (package gpuhealth).
	check   gpuhealth.Check
	runtime string
	// leaseBusy: the run waited out KBGEN_LEASE_WAIT; its 75 is the
	// node's load, not a machine fault (RecordExit).
	leaseBusy bool
	// retry is the job's side of a retry on the host's evidence (its mode
	// and BUILDKITE_RETRY_COUNT); completed is added after the run.
	retry noise.HostRetry
}

// NewJob reads the host's environment for req (ReadStep, the door) and
// plans the container (or, with LauncherProcess, the process:
// newProcessJob) from what it read. Errors: those of ReadStep, and a
// refusal of a step asking for more than its agent owns
// (dockerargv.DockerRun). Each error carries its exit code (exitcode.Of).
func NewJob(lookup contract.Lookup, req Request) (*Job, error) {
	step, err := ReadStep(lookup, req)
	if err != nil {
		return nil, withCode(err)
	}
	var j *Job
	if req.Launcher == LauncherProcess {
		j, err = newProcessJob(step, req)
	} else {
		j, err = newDockerJob(step, req)
	}
	return j, withCode(err)
}

// newDockerJob plans a gpu-docker node's step: its stage, its `docker
// run`, the lease and the clean-GPU check of the GPUs it gets.
func newDockerJob(step Step, req Request) (*Job, error) {
	name := dockerargv.ContainerName(step.Job.jobID)
	base, err := step.stageBase()
	if err != nil {
		return nil, fmt.Errorf("stage dir: %w", err)
	}
	stage := NewStage(base, name, step.Job.hasPayload)
	runner, err := runnerBinary(req.RunnerBinary)
	if err != nil {
		return nil, err
	}
	host := req.host()
	spec, err := dockerargv.DockerRun(step.Config, step.Placement, host, dockerargv.Options{
		Name:         name,
		Command:      req.Command,
		RunnerBinary: runner,
		NVMLHelper:   nvmlHelper(step.NVMLOff, runner),
		PayloadFile:  stage.PayloadFile,
		Env:          step.Env,
		NoGPU:        step.NoGPU,
	})
	if err != nil {
		return nil, err
	}
	check := gpuhealth.Check{StateDir: step.Lease.Dir, Sysfs: host.SysfsRoot, Reset: step.GPUReset, Path: step.Path}
	return &Job{Spec: spec, Stage: stage, Runner: runner, payload: step.Job.encoded, policy: step.Policy, lease: step.Lease, check: check, runtime: string(step.Config.Runtime),
		retry: noise.HostRetry{Ranked: step.Job.ranked, Retries: step.Retries}}, nil
}

// host is the machine the request names, else this one.
func (r Request) host() dockerargv.Host {
	if r.Host != nil {
		return *r.Host
	}
	return dockerargv.LocalHost()
}

// jobInput is what both launchers read of the job: the payload (none
// for a command other than `kbgen run`) and the job's id.
type jobInput struct {
	encoded    string
	hasPayload bool
	jobID      string
	// ranked: the job's mode is leaderboard or private (a host noise
	// retry needs it).
	ranked bool
}

// readJobInput reads the payload, refusing a bad one before anything
// starts, and, in a Buildkite job, checks its queue with route.
func readJobInput(lookup contract.Lookup, cmd []string, route func(contract.Lookup) error) (jobInput, error) {
	encoded, perr := payload.JoinEnv(lookup)
	ranked := false
	if dockerargv.IsRunnerCommand(cmd) {
		if perr != nil {
			return jobInput{}, perr
		}
		cfg, err := payload.Decode(encoded)
		if err != nil {
			return jobInput{}, err
		}
		ranked = cfg.Mode.Ranked()
	} else if perr != nil {
		var pe *payload.Error
		if !errors.As(perr, &pe) || pe.Kind != payload.KindNoPayload {
			return jobInput{}, perr
		}
		encoded = ""
	}
	in := jobInput{encoded: encoded, hasPayload: perr == nil, jobID: get(lookup, contract.EnvJobID), ranked: ranked}
	if in.jobID == "" {
		in.jobID = "local-" + strconv.Itoa(os.Getpid())
	} else if err := route(lookup); err != nil {
		return jobInput{}, err
	}
	return in, nil
}

// nvmlHelper is the kbgen-nvml beside runner, to mount beside it; "" when
// there is none or the job's env turns it off (Step.NVMLOff). Only ever beside the
// runner: a path taken from the job's env would let a step mount any
// host file the agent can read into its container.
func nvmlHelper(off bool, runner string) string {
	if off {
		return ""
	}
	return nvmlhelper.Locate(contract.MapLookup(nil), runner).Path
}

// runnerBinary is the kbgen the step runs: path, else this program.
func runnerBinary(path string) (string, error) {
	if path == "" {
		var err error
		if path, err = os.Executable(); err != nil {
			return "", refusal.Refusef("finding this kbgen to run as the runner: %v", err)
		}
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", fmt.Errorf("runner binary: %w", err)
	}
	return abs, nil
}

// StageBase is the directory stages go under: dir when given, else under
// the agent's build path (on disk, owned by the agent, and visible to
// dockerd, which a systemd PrivateTmp /tmp is not), else $TMPDIR or /tmp.
func StageBase(dir string, lookup contract.Lookup) string {
	if dir != "" {
		return dir
	}
	if bp, _ := lookup(contract.EnvBuildPath); bp != "" {
		return filepath.Join(bp, ".kbgen-stage")
	}
	if tmp, _ := lookup("TMPDIR"); tmp != "" {
		return tmp
	}
	return "/tmp"
}

// Outcome is what a run left: the container's exit code and, for
// `kbgen run`, what the sandbox vouched for.
type Outcome struct {
	Code int
	// Vouch is nil for a command other than `kbgen run` (nothing is
	// collected from it).
	Vouch *Vouch
	// LogDropped is the container output dropped at MaxLogBytes.
	LogDropped int64
	// HostNoise is the host section merged into noise.json; nil when the
	// runner sealed no noise.json.
	HostNoise *noise.HostSection
	// HostNoiseErr is a failure merging it; the exit code stands.
	HostNoiseErr error
	// HostRetry: the host section is external noise the runner could not
	// see, and the queue's policy grants this job its one retry (noise.json
	// says so): Exit is 75.
	HostRetry bool
	// WriteErr is a failure writing the vouched files (the host's disk).
	WriteErr error
}

// Run stages the payload and runs the container with l, its output made
// inert (JobLog). For `kbgen run` it hands the runner a fresh key on
// stdin and writes into outDir, a directory of the host's that the
// container never sees, only what it vouches for (see vouch). Stale
// results there are removed first, so they cannot pass for this run's.
func (j *Job) Run(ctx context.Context, l *Launcher, outDir string) (Outcome, error) {
	o, err := j.run(ctx, l, outDir)
	return o, withCode(err)
}

// run is Run, its errors without their exit code.
func (j *Job) run(ctx context.Context, l *Launcher, outDir string) (Outcome, error) {
	if err := j.createStage(); err != nil {
		return Outcome{}, err
	}
	defer j.Stage.Remove()
	if j.Spec.Sealed {
		if err := j.prepareOutDir(outDir); err != nil {
			return Outcome{}, err
		}
	}
	key, err := seal.NewKey()
	if err != nil {
		return Outcome{}, refusal.Refusef("%v", err)
	}
	l.logf("kbgen sandbox: %s", j.Spec.Summary())
	// No other job of this node may hold these GPUs while the container
	// runs (a one-GPU agent and a multi-GPU agent share them).
	j.lease.Logf = l.logf
	held, err := lease.Acquire(ctx, j.Spec.GPUs, j.lease)
	j.leaseBusy = errors.As(err, new(*lease.BusyError))
	if err != nil {
		return Outcome{}, err
	}
	defer held.Release()
	if err := j.clean(ctx, l); err != nil {
		return Outcome{}, err
	}
	return j.launch(ctx, l, outDir, key)
}

// createStage checks the runner is the static kbgen it mounts and stages
// the payload.
func (j *Job) createStage() error {
	if err := CheckStatic(j.Runner); err != nil {
		return &refusal.RefusedError{Msg: err.Error()}
	}
	if err := os.MkdirAll(filepath.Dir(j.Stage.Dir), 0o700|j.Stage.Mode&0o011); err != nil {
		return refusal.Refusef("stage dir: %v", err)
	}
	if err := j.Stage.Create(j.payload); err != nil {
		return refusal.Refusef("%v", err)
	}
	return nil
}

// clean makes the leased GPUs the job's alone: what a killed job left
// there removed, then the clean-GPU check.
func (j *Job) clean(ctx context.Context, l *Launcher) error {
	// A job killed with SIGKILL leaves its container running: its retry
	// must not find the name taken, and the next job on its GPUs must not
	// share them with it. Removed before the check, which such a
	// container would fail.
	l.RemoveStale(ctx, j.Spec)
	// Leased, and no container of this node's left on them: anything found
	// there now is foreign, leaked or broken (exit 75, retried elsewhere).
	j.check.Logf = l.logf
	return j.check.Run(ctx, j.runtime, j.Spec.GPUs)
}

// launch runs the step with its output made inert, the key on its stdin
// and its sealed output spooled when it is `kbgen run`, the host watched
// meanwhile; then vouches for what it sealed and merges the host's noise.
func (j *Job) launch(ctx context.Context, l *Launcher, outDir string, key seal.Key) (Outcome, error) {
	log := NewJobLog(MaxLogBytes)
	run := *l
	run.Stdout, run.Stderr = log.Stream(l.Stdout), log.Stream(l.Stderr)
	sp := &spool{}
	if j.Spec.Sealed {
		run.Stdin, run.Stdout = strings.NewReader(key.Text()), sp
	}
	// A process's /proc is its pod's: there is no host to watch.
	var watch *noise.HostWatch
	if j.Spec.Process == nil {
		watch = noise.BeginHost(noise.HostConfig{ProcRoot: j.procRoot, CPUs: j.Spec.CPUs()})
	}
	code, end, err := run.run(ctx, j.Spec)
	o := Outcome{Code: code, LogDropped: log.Close()}
	if err != nil {
		return Outcome{}, err
	}
	var host *noise.HostSection
	if watch != nil {
		host = watch.End(j.policy)
	}
	if !j.Spec.Sealed {
		return o, nil
	}
	v, werr := vouch(outDir, key, sp, code, end)
	o.Vouch, o.WriteErr = &v, werr
	if werr == nil && host != nil {
		o.HostNoise, o.HostRetry, o.HostNoiseErr = j.mergeHostNoise(outDir, host, v.Verified && code == 0)
	}
	return o, nil
}

// prepareOutDir removes what an earlier run left in outDir. For a
// process, which runs beside the sandbox and not in a container, outDir
// must also be where it cannot plant a symlink (CheckPrivateDir).
func (j *Job) prepareOutDir(outDir string) error {
	if err := removeVouched(outDir); err != nil {
		return err
	}
	if j.Spec.Process == nil {
		return nil
	}
	if err := os.MkdirAll(outDir, 0o700); err != nil {
		return refusal.Refusef("results directory: %v", err)
	}
	return process.CheckPrivateDir(outDir)
}

// mergeHostNoise adds the host section to the vouched noise.json (the
// runner's, sealed) in outDir, before anything publishes it, and decides
// the retry the runner could not (completed: the runner's verified
// result, exit 0); nil when there is no noise.json.
func (j *Job) mergeHostNoise(outDir string, h *noise.HostSection, completed bool) (*noise.HostSection, bool, error) {
	hr := j.retry
	hr.Completed = completed
	merged, retry, err := noise.MergeHost(filepath.Join(outDir, contract.NoiseFile), h, hr)
	if !merged {
		return nil, false, err
	}
	return h, retry, err
}
