package dockerargv

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/imageref"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// Options are the per-run inputs of DockerRun besides config and placement.
type Options struct {
	// Name is the container name, see ContainerName.
	Name string
	// Command is what the step runs (BUILDKITE_COMMAND, split). `kbgen run`
	// gets the payload, out file and --no-upload added, see RunnerCommand.
	Command []string
	// RunnerBinary is the host's static kbgen, mounted as ContainerRunner.
	RunnerBinary string
	// NVMLHelper is the host's kbgen-nvml, mounted beside the runner
	// (ContainerNVMLHelper) on an NVIDIA GPU so the noise record reads
	// NVML; "" mounts none and the runner uses nvidia-smi.
	NVMLHelper string
	// PayloadFile is the host file holding the payload; "" mounts none.
	PayloadFile string
	// Env is the container's environment, NAME=value, already vetted
	// (see ContainerEnv). Nothing else from the host gets in.
	Env []string
	// NoGPU leaves out the GPU flags (for tests on machines without a GPU
	// runtime). It only ever grants less; every placement check still runs.
	NoGPU bool
}

// GPUsLabel is the docker label on every container kbgen starts with GPUs:
// their ids (Spec.GPUs), comma-separated. Only kbgen sets it (the
// submission has no docker socket); the next job leased those GPUs reads
// it to find a container left behind (sandbox.Launcher.RemoveStale).
const GPUsLabel = "kbgen.gpus"

// DockerRun combines the step's request (cfg) with this agent's placement
// into the `docker run` argv. It never grants more than the placement
// owns: a request beyond it is a RefusedError, as is a GPU that is not
// there. A config that cannot be read is a ConfigError. The argv is built
// in the order `kbgen sandbox --dry-run` prints it: the run's own flags,
// the GPUs, the resources, the confinement, the mounts, the environment,
// the command.
func DockerRun(cfg plugincfg.GPUDocker, pl Placement, host Host, opts Options) (*Spec, error) {
	if host.Stat == nil {
		host.Stat = statDevice
	}
	if err := checkRequest(cfg, opts); err != nil {
		return nil, err
	}
	s := &Spec{Name: opts.Name, Sealed: IsRunnerCommand(opts.Command)}
	s.add(runFlags(opts.Name, s.Sealed)...)
	// Without a GPU (NoGPU: a job run by hand on a machine with no GPU
	// runtime) the agent needs no GPU placement either.
	if !opts.NoGPU {
		grant, err := grantGPUs(cfg, pl, host)
		if err != nil {
			return nil, err
		}
		s.add(grant.flags...)
		s.GPUs = grant.ids
		// What the next job leased these GPUs looks for: a container a
		// SIGKILLed sandbox left running on them (sandbox.Launcher.RemoveStale).
		s.add([]string{"--label", GPUsLabel + "=" + strings.Join(s.GPUs, ",")})
	}
	r, err := resourcesFor(cfg, pl, host)
	if err != nil {
		return nil, err
	}
	s.add(r.flags(pl)...)
	if cfg.Network != "" && cfg.Network != "none" {
		return nil, refusal.Refusef("network: %q asked, evaluation steps get no network (only \"none\")", cfg.Network)
	}
	s.add(confinement(r)...)
	s.add(mounts(cfg, opts)...)
	s.add(envFlags(opts, len(s.GPUs))...)
	s.add(commandLines(cfg.Image, opts.Command)...)
	return s, nil
}

// checkRequest refuses what no placement could run: no image or a bad
// one, no command, and host paths docker --mount cannot carry.
func checkRequest(cfg plugincfg.GPUDocker, opts Options) error {
	if cfg.Image == "" {
		return refusal.ConfigErrorf("image", "missing: the step must name its runner image")
	}
	if _, err := imageref.Parse(cfg.Image); err != nil {
		return refusal.ConfigErrorf("image", "%v", err)
	}
	if len(opts.Command) == 0 {
		return refusal.ConfigErrorf("", "no command to run in the container")
	}
	if opts.Name == "" || opts.RunnerBinary == "" {
		return fmt.Errorf("planning docker run: container name and runner binary are required")
	}
	for _, p := range []string{opts.RunnerBinary, opts.NVMLHelper, opts.PayloadFile} {
		// --mount is comma-separated; a comma in a path would inject options.
		if strings.ContainsAny(p, ",\n") {
			return refusal.Refusef("host path %q contains a comma or newline, which docker --mount cannot carry", p)
		}
	}
	return nil
}

// runFlags are the run's own: its name, removal, PID 1 and signals.
func runFlags(name string, sealed bool) [][]string {
	l := [][]string{{"run"}, {"--name", name}, {"--rm"}}
	if !sealed {
		// Any other command gets tini as PID 1: ordinary signal semantics
		// (PID 1 ignores SIGTERM without a handler) and its orphans
		// reaped. `kbgen run --sealed` is PID 1 itself: a PID 1 of the
		// submission's uid that is dumpable (tini) lets the submission open
		// /proc/1/fd/1 and write into the job log; kbgen is not dumpable
		// (cmd/kbgen/nodump_linux.go), so its /proc/1 files are root's, and
		// it handles SIGTERM and reaps orphans as PID 1 must
		// (runner/reaper.go).
		l = append(l, []string{"--init"})
	}
	// The sandbox forwards signals itself (docker stop by name), which also
	// works when the docker client is gone.
	l = append(l, []string{"--sig-proxy=false"})
	if sealed {
		// stdin carries the job's result key to `kbgen run --sealed`, then
		// closes (package seal).
		l = append(l, []string{"--interactive"})
	}
	return l
}

// resources are the step's share of its agent: what it asked for within
// what the placement owns, else the placement's or the defaults.
type resources struct {
	cpus cpulist.Set
	mem  size.Bytes
	shm  size.Bytes
	pids int
}

// resourcesFor checks the step's asks against the placement, in the
// order the argv names them: CPUs, memory, /dev/shm, processes.
func resourcesFor(cfg plugincfg.GPUDocker, pl Placement, host Host) (resources, error) {
	r := resources{cpus: pl.CPUs, mem: pl.Memory}
	var err error
	if cfg.CPUs > 0 {
		if r.cpus, err = pickCPUs(pl.CPUs, cfg.CPUs, os.DirFS(host.SysfsRoot)); err != nil {
			return r, refusal.Refusef("cpus: %v", err)
		}
	}
	if r.mem, err = memoryFor(cfg, pl); err != nil {
		return r, err
	}
	if r.shm, err = shmFor(cfg, pl, r.mem); err != nil {
		return r, err
	}
	r.pids, err = pidsFor(cfg, pl)
	return r, err
}

func memoryFor(cfg plugincfg.GPUDocker, pl Placement) (size.Bytes, error) {
	if cfg.Memory == "" {
		return pl.Memory, nil
	}
	mem, err := size.Parse(cfg.Memory)
	if err != nil {
		return 0, refusal.ConfigErrorf("memory", "%v", err)
	}
	if mem > pl.Memory {
		return 0, refusal.Refusef("memory: %s asked, this agent owns %s (%s)", mem, pl.Memory, contract.EnvMemory)
	}
	return mem, nil
}

// shmFor is /dev/shm: at most the agent's KERNELBOT_SHM_MAX and the
// container's memory (its pages are charged there), DefaultShmSize
// unless asked.
func shmFor(cfg plugincfg.GPUDocker, pl Placement, mem size.Bytes) (size.Bytes, error) {
	shmCap := mem
	if pl.ShmMax > 0 {
		shmCap = min(pl.ShmMax, mem)
	}
	if cfg.ShmSize == "" {
		return min(DefaultShmSize, shmCap), nil
	}
	shm, err := size.Parse(cfg.ShmSize)
	if err != nil {
		return 0, refusal.ConfigErrorf("shm-size", "%v", err)
	}
	if shm > shmCap {
		return 0, refusal.Refusef("shm-size: %s asked, this agent allows %s", shm, shmCap)
	}
	return shm, nil
}

func pidsFor(cfg plugincfg.GPUDocker, pl Placement) (int, error) {
	pids := DefaultPidsLimit
	if pl.PidsMax > 0 {
		pids = min(pids, pl.PidsMax)
	}
	if cfg.PidsLimit > 0 {
		if pl.PidsMax > 0 && cfg.PidsLimit > pl.PidsMax {
			return 0, refusal.Refusef("pids-limit: %d asked, this agent allows %d (%s)", cfg.PidsLimit, pl.PidsMax, contract.EnvPidsMax)
		}
		pids = cfg.PidsLimit
	}
	return pids, nil
}

// flags are the resources' docker flags, under the placement's cgroup
// parent.
func (r resources) flags(pl Placement) [][]string {
	var l [][]string
	if pl.CgroupParent != "" {
		// On a cgroup v2 node the host's slices are confined to the
		// housekeeping CPUs; the container must not inherit that.
		l = append(l, []string{"--cgroup-parent", pl.CgroupParent})
	}
	return append(l,
		[]string{"--cpuset-cpus", r.cpus.String()},
		[]string{"--cpuset-mems", pl.Mems.String()},
		[]string{"--memory", r.mem.String()},
		// Equal to --memory: no swap, so a memory hog is OOM-killed
		// instead of slowing the whole node down.
		[]string{"--memory-swap", r.mem.String()},
		[]string{"--pids-limit", strconv.Itoa(r.pids)},
	)
}

// confinement is what every step gets whatever it asks: no network, no
// capabilities, a read-only root as an unprivileged user, and bounded
// tmpfs mounts for everything it writes.
func confinement(r resources) [][]string {
	uid, gid, _ := strings.Cut(ContainerUser, ":")
	return [][]string{
		{"--network", "none"},
		{"--ipc", "private"},
		{"--cap-drop", "ALL"},
		{"--security-opt", "no-new-privileges"},
		{"--read-only"},
		{"--user", ContainerUser},
		// exec: the runner compiles and runs binaries here. The size is
		// the memory limit because tmpfs pages are charged to the
		// container's memory cgroup anyway; --memory is the real bound.
		// Every writable path is a tmpfs: nothing the job writes lands on
		// the host's disk.
		{"--tmpfs", fmt.Sprintf("%s:rw,exec,nosuid,nodev,size=%s,nr_inodes=%d,uid=%s,gid=%s,mode=0700", ContainerWorkDir, r.mem.String(), ScratchInodes, uid, gid)},
		{"--tmpfs", fmt.Sprintf("/tmp:rw,exec,nosuid,nodev,size=%s,nr_inodes=%d,mode=1777", r.mem.String(), ScratchInodes)},
		{"--tmpfs", fmt.Sprintf("%s:rw,noexec,nosuid,nodev,size=%s,nr_inodes=%d,uid=%s,gid=%s,mode=0700", ContainerOutDir, min(OutDirSize, r.mem).String(), OutDirInodes, uid, gid)},
		// /dev/shm as a tmpfs of ours instead of --shm-size, which sets
		// only the size: docker then mounts no shm of its own (the IPC
		// namespace is still private), and the inodes are bounded as the
		// others are. docker's own options (noexec, nosuid, nodev, mode
		// 1777) are kept.
		{"--tmpfs", shmTmpfs(r.shm)},
		{"--workdir", ContainerWorkDir},
	}
}

// mounts are the host files the container reads: the runner, the NVML
// helper beside it on an NVIDIA GPU, the payload; all read-only.
func mounts(cfg plugincfg.GPUDocker, opts Options) [][]string {
	bind := func(source, target string) []string {
		return []string{"--mount", "type=bind,source=" + source + ",target=" + target + ",readonly"}
	}
	l := [][]string{bind(opts.RunnerBinary, ContainerRunner)}
	if opts.NVMLHelper != "" && !opts.NoGPU && cfg.Runtime == contract.RuntimeNVIDIA {
		// Dynamically linked: it runs where the image's glibc is new
		// enough (2.34+), and the runner falls back to nvidia-smi where
		// it is not. Read-only, and not dumpable once started, like kbgen.
		l = append(l, bind(opts.NVMLHelper, ContainerNVMLHelper))
	}
	if opts.PayloadFile != "" {
		l = append(l, bind(opts.PayloadFile, ContainerPayload))
	}
	return l
}

// envFlags are the container's environment: opts.Env (vetted, see
// ContainerEnv) and, given GPUs, that it must see them and how many.
func envFlags(opts Options, gpus int) [][]string {
	var l [][]string
	for _, e := range opts.Env {
		l = append(l, []string{"--env", e})
	}
	if !opts.NoGPU {
		// A container that was given a GPU but sees none is the machine's
		// fault: the runner then exits 75 and Buildkite retries elsewhere.
		l = append(l, []string{"--env", contract.EnvRequireGPU + "=1"})
		// How many it was given: the runner's device_count and
		// POPCORN_GPUS (rocm-smi in a container lists every card of the
		// host, sysfs being shared).
		l = append(l, []string{"--env", contract.EnvGPUCount + "=" + strconv.Itoa(gpus)})
	}
	return l
}

// commandLines are the entrypoint, the image and the command's
// arguments. The command's first word is the entrypoint, so an image's
// own ENTRYPOINT (a runner image may use kbgen) never wraps our command.
func commandLines(image string, command []string) [][]string {
	cmd := RunnerCommand(command)
	l := [][]string{{"--entrypoint", cmd[0]}, {image}}
	if len(cmd) > 1 {
		l = append(l, cmd[1:])
	}
	return l
}
