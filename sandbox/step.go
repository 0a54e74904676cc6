package sandbox

import (
	"path/filepath"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/lease"
	"github.com/gpu-mode/kbgen/sandbox/process"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/signing"
)

// Step is everything `kbgen sandbox` reads of its host's environment:
// what the step asked for, where this agent may run, the job, and the
// node's policies. ReadStep reads it once, at the door, and refuses a bad
// environment there, every refusal's message in one place; the rest of
// the sandbox plans and runs from this value and never looks anything up.
type Step struct {
	// Config is what the step asked for: its gpu-docker plugin config
	// (the docker launcher's; a pod's step has none).
	Config plugincfg.GPUDocker
	// Placement is where this agent may run (the docker launcher's:
	// the placement env `kbgen node install` writes).
	Placement dockerargv.Placement
	// Job is the job: its payload, id, and whether it is ranked.
	Job jobInput
	// Policy is the queue's noise policy, which judges the host section
	// of noise.json; the defaults where the env's cannot be read (the
	// runner refuses it inside the container).
	Policy noisepolicy.Policy
	// Lease is where and how long the job waits for its GPUs.
	Lease lease.Options
	// GPUReset lets the clean-GPU check reset a GPU (KBGEN_GPU_RESET=1).
	GPUReset bool
	// Retries is BUILDKITE_RETRY_COUNT, for a retry on the host's evidence.
	Retries string
	// NoGPU leaves the GPU out (Request.NoGPU or KBGEN_SANDBOX_NO_GPU=1).
	NoGPU bool
	// NVMLOff: the job's env turned the kbgen-nvml mount off.
	NVMLOff bool
	// Env is the step's whole environment: the container's allow-list
	// (dockerargv.ContainerEnv) and, for a process, the image's runtime
	// variables (process.Env).
	Env []string
	// StageBase is the directory the stage goes under.
	StageBase string
	// Path is the sandbox's PATH, where the clean-GPU check finds
	// nvidia-smi and amd-smi.
	Path string
	// UID and GID are the process launcher's step's.
	UID, GID int
}

// ReadStep is the door: it reads and checks the host's environment for
// req, in the order a step is judged (the launcher, the plugin config,
// the placement, the payload and the queue it was signed for, the step
// signature, the node's settings). Errors: refusal.ConfigError (exit 2),
// refusal.RefusedError (75), *signing.MisroutedError,
// *signing.StepSignatureError or a payload.Error (65).
func ReadStep(lookup contract.Lookup, req Request) (Step, error) {
	if len(req.Command) == 0 {
		return Step{}, refusal.ConfigErrorf("", "no command to run in the container")
	}
	switch req.Launcher {
	case "", LauncherDocker:
		return readDockerStep(lookup, req)
	case LauncherProcess:
		return readProcessStep(lookup, req)
	}
	return Step{}, refusal.ConfigErrorf("launcher", "%q is not %q or %q", req.Launcher, LauncherDocker, LauncherProcess)
}

// readDockerStep is a gpu-docker node's step: the plugin config, the
// agent's placement, the job on the queue it was signed for, the step's
// signature, and the node's lease and reset settings.
func readDockerStep(lookup contract.Lookup, req Request) (Step, error) {
	var s Step
	var err error
	if s.Config, err = ConfigFromEnv(lookup); err != nil {
		return s, err
	}
	if s.Placement, err = dockerargv.PlacementFromEnv(lookup); err != nil {
		return s, err
	}
	if s.Job, err = readJobInput(lookup, req.Command, signing.CheckQueueBinding); err != nil {
		return s, err
	}
	if err := CheckStepSignature(lookup, req.Command, s.Config, s.Job.encoded); err != nil {
		return s, err
	}
	if s.Lease, err = lease.OptionsFromEnv(lookup); err != nil {
		return s, err
	}
	s.readCommon(lookup, req)
	s.Env = dockerargv.ContainerEnv(lookup)
	s.StageBase = StageBase(req.StageDir, lookup)
	s.GPUReset = get(lookup, contract.EnvGPUReset) == "1"
	s.Path = get(lookup, "PATH")
	return s, nil
}

// readProcessStep is a pod's step: the job on the queue it was routed
// to and the uid it runs as; no plugin config and no placement (the
// scheduler placed the pod and its cgroup bounds it).
func readProcessStep(lookup contract.Lookup, req Request) (Step, error) {
	in, err := readJobInput(lookup, req.Command, signing.CheckRunRouting)
	if err != nil {
		return Step{}, err
	}
	return processStep(lookup, req, in)
}

// processStep is the rest of a pod's step, its job read.
func processStep(lookup contract.Lookup, req Request, in jobInput) (Step, error) {
	s := Step{Job: in}
	var err error
	if s.UID, s.GID, err = ParseUser(req.User); err != nil {
		return s, refusal.ConfigErrorf("user", "%v", err)
	}
	s.readCommon(lookup, req)
	s.Env = process.Env(dockerargv.ContainerEnv(lookup), lookup, req.Protect, !s.NoGPU)
	s.StageBase = req.StageDir
	if s.StageBase == "" {
		// Never under the build path, StageBase's default: in a pod that
		// is inside /workspace, which the process must not reach.
		s.StageBase = StageBase("", func(k string) (string, bool) {
			if k == contract.EnvBuildPath {
				return "", false
			}
			return lookup(k)
		})
	}
	return s, nil
}

// readCommon reads what both launchers' steps have.
func (s *Step) readCommon(lookup contract.Lookup, req Request) {
	// A bad policy: the runner refuses it inside the container, and the
	// host section judges with the defaults.
	policy, _ := noisepolicy.Parse(get(lookup, contract.EnvNoisePolicy))
	s.Policy = policy.WithDefaults()
	s.Retries = get(lookup, contract.EnvBuildkiteRetryCount)
	s.NoGPU = req.NoGPU || get(lookup, contract.EnvSandboxNoGPU) == "1"
	s.NVMLOff = get(lookup, contract.EnvNVMLHelper) == "off"
}

// stageBase is s.StageBase made absolute.
func (s Step) stageBase() (string, error) { return filepath.Abs(s.StageBase) }

func get(lookup contract.Lookup, k string) string {
	v, _ := lookup(k)
	return v
}
