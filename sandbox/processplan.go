package sandbox

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// How kbgen sandbox runs a step (`--launcher`).
const (
	// LauncherDocker is a `docker run` on a gpu-docker node (plan.go).
	LauncherDocker = "docker"
	// LauncherProcess is a process under its own uid beside the sandbox,
	// in the container the sandbox itself runs in: the Kubernetes
	// backend's step (process.go).
	LauncherProcess = "process"
)

// ProcessSpec is a planned process run: `kbgen run --sealed` (or the
// step's other command) started by a root sandbox as an unprivileged
// uid that neither the agent nor the sandbox shares, so the submission
// under it can neither read their /proc files (the agent's token) nor
// signal or ptrace them.
type ProcessSpec struct {
	Argv []string
	// Env is the whole environment: ContainerEnv plus the image's
	// runtime variables (ProcessEnvNames); nothing else of the sandbox's.
	Env []string
	// Dir is the working directory, writable by UID.
	Dir string
	// UID and GID are the process's; never 0.
	UID, GID int
	// Groups are its supplementary groups: the GPU device files' groups
	// (ROCm's /dev/kfd and render nodes), never 0; empty for NVIDIA.
	Groups []int
	// Protect are directories made root's alone (0700) before the
	// process starts: in an agent-stack-k8s pod, /workspace holds the
	// agent binary the publish runs, the agent's unauthenticated
	// coordination socket and the hooks and plugins directories.
	Protect []string
	// Sticky are the step's scratch directories (its Dir, /tmp, /dev/shm):
	// where one is root's and world-writable, as an emptyDir is (0777),
	// it gets the sticky bit, so the step can neither remove nor rename
	// what root keeps there (the agent's files in /tmp).
	Sticky []string
}

// ProcessEnvNames are the sandbox's own variables the process gets, by
// name: in a pod they come from the runner image (where a docker
// container gets the image's ENV), and none of them is a secret. PATH
// loses any entry under a protected directory (the agent's, in a pod).
var ProcessEnvNames = []string{"PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONUNBUFFERED", "CUDA_HOME", "ROCM_PATH", "HIP_PATH", "LANG", "LC_ALL"}

// newProcessJob plans a step for the process launcher: no gpu-docker
// config and no placement (in a pod the scheduler placed it and the
// cgroup bounds it), the payload staged where the process can read it.
func newProcessJob(lookup func(string) (string, bool), req Request, in jobInput) (*Job, error) {
	uid, gid, err := ParseUser(req.User)
	if err != nil {
		return nil, refusal.ConfigErrorf("user", "%v", err)
	}
	runner, err := runnerBinary(req.RunnerBinary)
	if err != nil {
		return nil, err
	}
	base := req.StageDir
	if base == "" {
		// Never under the build path, StageBase's default: in a pod that
		// is inside /workspace, which the process must not reach.
		base = StageBase("", func(k string) (string, bool) {
			if k == contract.EnvBuildPath {
				return "", false
			}
			return lookup(k)
		})
	}
	if base, err = filepath.Abs(base); err != nil {
		return nil, fmt.Errorf("stage dir: %w", err)
	}
	name := ContainerName(in.jobID)
	stage := NewStage(base, name, in.hasPayload)
	// The process reads the payload as its own uid: the stage is
	// traversable (not listable), the payload 0444 as on docker nodes.
	stage.Mode = 0o711
	dir := req.WorkDir
	if dir == "" {
		dir = ContainerWorkDir
	}
	p := &ProcessSpec{UID: uid, GID: gid, Dir: dir, Protect: req.Protect, Sticky: []string{dir, "/tmp", "/dev/shm"}}
	result := filepath.Join(dir, ".kbgen-out", contract.ResultFile)
	p.Argv = runnerArgv(req.Command, runner, stage.PayloadFile, result)
	noGPU := req.NoGPU || get(lookup, contract.EnvSandboxNoGPU) == "1"
	p.Env = processEnv(lookup, p.Protect, !noGPU)
	if !noGPU {
		host := LocalHost()
		if req.Host != nil {
			host = *req.Host
		}
		p.Groups = deviceGroups(host)
	}
	spec := &Spec{Name: name, Program: "setpriv", Sealed: IsRunnerCommand(req.Command), Process: p}
	spec.Lines = p.lines()
	policy, _ := noise.ParsePolicy(get(lookup, contract.EnvNoisePolicy))
	return &Job{Spec: spec, Stage: stage, Runner: runner, payload: in.encoded, policy: policy.WithDefaults()}, nil
}

func get(lookup func(string) (string, bool), k string) string {
	v, _ := lookup(k)
	return v
}

// ParseUser reads "UID:GID" (numbers; GID defaults to UID). Root is
// refused: the point is a uid that holds nothing.
func ParseUser(s string) (uid, gid int, err error) {
	if s == "" {
		s = ContainerUser
	}
	u, g, hasGID := strings.Cut(s, ":")
	if !hasGID {
		g = u
	}
	uid, uerr := strconv.Atoi(u)
	gid, gerr := strconv.Atoi(g)
	switch {
	case uerr != nil || gerr != nil || uid < 0 || gid < 0:
		return 0, 0, fmt.Errorf("%q is not UID:GID in numbers, like %s", s, ContainerUser)
	case uid == 0 || gid == 0:
		return 0, 0, fmt.Errorf("%q: the step never runs as root's uid or gid", s)
	}
	return uid, gid, nil
}

// processEnv is ContainerEnv plus the image's runtime variables.
func processEnv(lookup func(string) (string, bool), protect []string, requireGPU bool) []string {
	env := ContainerEnv(lookup)
	for _, k := range ProcessEnvNames {
		v, ok := lookup(k)
		if k == "PATH" {
			v, ok = withoutProtected(v, protect), true
		}
		if ok && v != "" && !strings.ContainsAny(v, "\n\x00") {
			env = append(env, k+"="+v)
		}
	}
	if requireGPU {
		// The device plugin gave the pod its GPUs: one it cannot see is
		// the machine's fault (the runner exits 75).
		env = append(env, contract.EnvRequireGPU+"=1")
	}
	return env
}

// withoutProtected drops PATH entries under a protected directory, and
// gives a standard PATH when none is left.
func withoutProtected(path string, protect []string) string {
	var keep []string
	for _, e := range filepath.SplitList(path) {
		if e != "" && !slices.ContainsFunc(protect, func(p string) bool { return e == p || strings.HasPrefix(e, strings.TrimSuffix(p, "/")+"/") }) {
			keep = append(keep, e)
		}
	}
	if len(keep) == 0 {
		return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	}
	return strings.Join(keep, ":")
}

// deviceGroups are the groups of the GPU device files a ROCm process
// opens (docker's --group-add on a gpu-docker node); root's group never.
func deviceGroups(host Host) []int {
	if host.Stat == nil {
		host.Stat = statDevice
	}
	if host.Glob == nil {
		host.Glob = filepath.Glob
	}
	paths, _ := host.Glob("/dev/dri/renderD*")
	if host.KFD != "" {
		paths = append([]string{host.KFD}, paths...)
	}
	var groups []int
	for _, p := range paths {
		if d, err := host.Stat(p); err == nil && d.CharDevice && d.GID != 0 && !slices.Contains(groups, d.GID) {
			groups = append(groups, d.GID)
		}
	}
	return groups
}

// lines are the process spec as util-linux's setpriv would start it,
// for `kbgen sandbox --dry-run`: the same uid, groups, no capabilities,
// no_new_privs, parent-death signal, its own session and environment.
func (p *ProcessSpec) lines() [][]string {
	l := [][]string{{"--reuid", strconv.Itoa(p.UID)}, {"--regid", strconv.Itoa(p.GID)}}
	if len(p.Groups) == 0 {
		l = append(l, []string{"--clear-groups"})
	} else {
		gs := make([]string, len(p.Groups))
		for i, g := range p.Groups {
			gs[i] = strconv.Itoa(g)
		}
		l = append(l, []string{"--groups", strings.Join(gs, ",")})
	}
	l = append(l, []string{"--inh-caps=-all"}, []string{"--ambient-caps=-all"}, []string{"--no-new-privs"}, []string{"--pdeathsig", "KILL"})
	l = append(l, []string{"--", "setsid", "env", "-i", "-C", p.Dir})
	for _, e := range p.Env {
		l = append(l, []string{e})
	}
	return append(l, p.Argv)
}

// processSummary is Summary's line for a process spec.
func (p *ProcessSpec) summary() string {
	s := fmt.Sprintf("process as uid %d:%d, groups %v, no capabilities, no_new_privs, in %s", p.UID, p.GID, p.Groups, p.Dir)
	if len(p.Protect) > 0 {
		s += ", " + strings.Join(p.Protect, " ") + " made root's alone"
	}
	return s
}
