package process

import (
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// Spec is a planned process run: `kbgen run --sealed` (or the
// step's other command) started by a root sandbox as an unprivileged
// uid that neither the agent nor the sandbox shares, so the submission
// under it can neither read their /proc files (the agent's token) nor
// signal or ptrace them.
type Spec struct {
	Argv []string
	// Env is the whole environment: the container's (the docker
	// launcher's allow-list) plus the image's runtime variables
	// (EnvNames); nothing else of the sandbox's.
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

// EnvNames are the sandbox's own variables the process gets, by
// name: in a pod they come from the runner image (where a docker
// container gets the image's ENV), and none of them is a secret. PATH
// loses any entry under a protected directory (the agent's, in a pod).
var EnvNames = []string{"PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONUNBUFFERED", "CUDA_HOME", "ROCM_PATH", "HIP_PATH", "LANG", "LC_ALL"}

// Env is the process's environment: base (the container's) plus the
// image's runtime variables (EnvNames) the sandbox has, PATH without
// any entry under a protected directory, and, given GPUs, that it must
// see them.
func Env(base []string, lookup contract.Lookup, protect []string, requireGPU bool) []string {
	env := slices.Clone(base)
	for _, k := range EnvNames {
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

// Lines are the process spec as util-linux's setpriv would start it,
// for `kbgen sandbox --dry-run`: the same uid, groups, no capabilities,
// no_new_privs, parent-death signal, its own session and environment.
func (p *Spec) Lines() [][]string {
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

// Summary is the job log's line for a process spec.
func (p *Spec) Summary() string {
	s := fmt.Sprintf("process as uid %d:%d, groups %v, no capabilities, no_new_privs, in %s", p.UID, p.GID, p.Groups, p.Dir)
	if len(p.Protect) > 0 {
		s += ", " + strings.Join(p.Protect, " ") + " made root's alone"
	}
	return s
}
