package sandbox

import (
	"cmp"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/imageref"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/shellquote"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// Paths and identities inside the container. The runner image needs none of
// them to exist: every one is a mount or a tmpfs.
const (
	// ContainerRunner is where the host's static kbgen is mounted, over any
	// kbgen the image has, so the runner always matches the host's version.
	ContainerRunner = "/usr/local/bin/kbgen"
	// ContainerNVMLHelper is where the host's kbgen-nvml is mounted:
	// beside the runner, where nvmlhelper.Locate looks.
	ContainerNVMLHelper = "/usr/local/bin/kbgen-nvml"
	// ContainerPayload is the read-only payload file (the encoded payload,
	// exactly the reassembled KERNELBOT_PAYLOAD text).
	ContainerPayload = "/kbgen/payload"
	// ContainerOutDir is the tmpfs `kbgen run` writes result.json to. It
	// never leaves the container: the result comes out sealed on the
	// runner's stdout (package seal), and the host reads no directory the
	// container could write.
	ContainerOutDir = "/kbgen/out"
	// ContainerResult is the runner's result file.
	ContainerResult = ContainerOutDir + "/" + contract.ResultFile
	// ContainerWorkDir is the tmpfs the runner writes sources to, compiles
	// and runs in (mounted with exec).
	ContainerWorkDir = "/work"
	// ContainerUser is the unprivileged uid:gid the step runs as. Numeric,
	// so the image needs no passwd entry; runner images create their user
	// with this uid.
	ContainerUser = "1000:1000"
)

// Defaults for what a step leaves unset.
const (
	// DefaultPidsLimit stops a fork bomb long before the host notices while
	// leaving room for compilers and PyTorch's thread pools.
	DefaultPidsLimit = 4096
	// DefaultShmSize is /dev/shm when the step does not say (docker's 64m
	// breaks PyTorch's shared-memory tensors and NCCL).
	DefaultShmSize size.Bytes = 8 * size.GiB
)

// Bounds of the container's writable tmpfs mounts, besides the memory
// limit their pages are charged to: inodes (a tmpfs inode is kernel
// memory that a memory cgroup may not count) and, for the out dir, bytes.
const (
	// OutDirSize is /kbgen/out at most: result.json, noise.json and the
	// profile traces, which the sealed result carries anyway.
	OutDirSize size.Bytes = 256 * size.MiB
	// OutDirInodes is /kbgen/out's file count at most: a handful is used.
	OutDirInodes = 1024
	// ScratchInodes bounds /work and /tmp each: compilers, PyTorch and
	// Triton caches write thousands of files, never a million.
	ScratchInodes = 1 << 20
	// ShmInodes bounds /dev/shm: PyTorch's shared tensors, NCCL's and
	// RCCL's buffers and Python's semaphores are a few files per process
	// or peer, never tens of thousands.
	ShmInodes = 1 << 16
)

// ContainerShm is the container's POSIX shared memory, its own tmpfs.
const ContainerShm = "/dev/shm"

// Host is what Plan reads from the machine besides the environment, so
// tests can describe a machine they are not running on.
type Host struct {
	// SysfsRoot is "/sys": CPU topology for keeping SMT siblings together.
	SysfsRoot string
	// KFD is the ROCm compute device, "/dev/kfd".
	KFD string
	// Stat describes a device file; nil means os.Stat.
	Stat func(path string) (Device, error)
	// Glob lists device files (the process launcher's render nodes); nil
	// means filepath.Glob.
	Glob func(pattern string) ([]string, error)
}

// Device is what Plan needs to know about a device file.
type Device struct {
	CharDevice bool
	GID        int
}

// LocalHost is this machine.
func LocalHost() Host { return Host{SysfsRoot: "/sys", KFD: "/dev/kfd", Stat: statDevice} }

func statDevice(path string) (Device, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Device{}, err
	}
	d := Device{CharDevice: fi.Mode()&os.ModeCharDevice != 0}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		d.GID = int(st.Gid)
	}
	return d, nil
}

// Options are the per-run inputs of Plan besides config and placement.
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

// Spec is one planned `docker run`: the argv grouped as it is printed, one
// flag (with its value) per line.
type Spec struct {
	Name  string
	Lines [][]string
	// GPUs are the GPUs the container is given, as the lease and the
	// clean-GPU check name them (NVIDIA UUIDs, AMD render nodes); none
	// with NoGPU.
	GPUs []string
	// Sealed: the command is `kbgen run --sealed`, which reads the job's
	// result key on stdin and seals its result on stdout (package seal).
	Sealed bool
	// Program is what String prints first; "" means docker.
	Program string
	// Process, when set, is a process launcher's run (LauncherProcess);
	// Lines are then its setpriv equivalent, for the dry run.
	Process *ProcessSpec
}

// CPUs is the container's cpuset (--cpuset-cpus); nil when the spec
// sets none.
func (s *Spec) CPUs() []int {
	cpus, err := cpulist.Parse(s.CPUSet())
	if err != nil || len(cpus) == 0 {
		return nil
	}
	return cpus
}

// CPUSet is the --cpuset-cpus value as planned; "" when none.
func (s *Spec) CPUSet() string {
	for _, l := range s.Lines {
		if len(l) == 2 && l[0] == "--cpuset-cpus" {
			return l[1]
		}
	}
	return ""
}

// Argv is the docker argv after "docker".
func (s *Spec) Argv() []string {
	var argv []string
	for _, l := range s.Lines {
		argv = append(argv, l...)
	}
	return argv
}

// String is the argv as `kbgen sandbox --dry-run` prints it: "docker run",
// then one flag per line, shell-quoted where needed, continued with '\'
// so it can be pasted into a shell.
func (s *Spec) String() string {
	var b strings.Builder
	b.WriteString(cmp.Or(s.Program, "docker"))
	for _, l := range s.Lines {
		b.WriteString(" \\\n ")
		for _, w := range l {
			b.WriteByte(' ')
			b.WriteString(shellquote.Quote(w))
		}
	}
	b.WriteByte('\n')
	return b.String()
}

// Summary is one line for the job log: what the container was given.
func (s *Spec) Summary() string {
	if s.Process != nil {
		return s.Name + ": " + s.Process.summary()
	}
	var parts []string
	for _, l := range s.Lines {
		if len(l) != 2 {
			continue
		}
		switch l[0] {
		case "--gpus", "--device", "--cpuset-cpus", "--cpuset-mems", "--memory", "--pids-limit", "--network":
			parts = append(parts, strings.TrimPrefix(l[0], "--")+" "+l[1])
		}
		if l[0] == "--memory" && s.ShmSize() != "" {
			parts = append(parts, "shm-size "+s.ShmSize())
		}
	}
	return s.Name + ": " + strings.Join(parts, ", ")
}

// shmTmpfs is the --tmpfs value of /dev/shm of the given size.
func shmTmpfs(shm size.Bytes) string {
	return fmt.Sprintf("%s:rw,noexec,nosuid,nodev,size=%s,nr_inodes=%d,mode=1777", ContainerShm, shm.String(), ShmInodes)
}

// ShmSize is /dev/shm's size as planned (docker's syntax); "" when the
// spec mounts none.
func (s *Spec) ShmSize() string {
	for _, l := range s.Lines {
		if len(l) != 2 || l[0] != "--tmpfs" {
			continue
		}
		if opts, ok := strings.CutPrefix(l[1], ContainerShm+":"); ok {
			for _, o := range strings.Split(opts, ",") {
				if v, ok := strings.CutPrefix(o, "size="); ok {
					return v
				}
			}
		}
	}
	return ""
}

// Plan combines the step's request (cfg) with this agent's placement into
// the `docker run` argv. It never grants more than the placement owns: a
// request beyond it is a refusal.RefusedError, as is a GPU that is not there. A
// config that cannot be read is a refusal.ConfigError.
func DockerRun(cfg plugincfg.GPUDocker, pl Placement, host Host, opts Options) (*Spec, error) {
	if host.Stat == nil {
		host.Stat = statDevice
	}
	if cfg.Image == "" {
		return nil, refusal.ConfigErrorf("image", "missing: the step must name its runner image")
	}
	if _, err := imageref.Parse(cfg.Image); err != nil {
		return nil, refusal.ConfigErrorf("image", "%v", err)
	}
	if len(opts.Command) == 0 {
		return nil, refusal.ConfigErrorf("", "no command to run in the container")
	}
	if opts.Name == "" || opts.RunnerBinary == "" {
		return nil, fmt.Errorf("planning docker run: container name and runner binary are required")
	}
	for _, p := range []string{opts.RunnerBinary, opts.NVMLHelper, opts.PayloadFile} {
		// --mount is comma-separated; a comma in a path would inject options.
		if strings.ContainsAny(p, ",\n") {
			return nil, refusal.Refusef("host path %q contains a comma or newline, which docker --mount cannot carry", p)
		}
	}

	s := &Spec{Name: opts.Name}
	add := func(words ...string) { s.Lines = append(s.Lines, words) }
	add("run")
	add("--name", opts.Name)
	add("--rm")
	s.Sealed = IsRunnerCommand(opts.Command)
	if !s.Sealed {
		// Any other command gets tini as PID 1: ordinary signal semantics
		// (PID 1 ignores SIGTERM without a handler) and its orphans
		// reaped. `kbgen run --sealed` is PID 1 itself: a PID 1 of the
		// submission's uid that is dumpable (tini) lets the submission open
		// /proc/1/fd/1 and write into the job log; kbgen is not dumpable
		// (cmd/kbgen/nodump_linux.go), so its /proc/1 files are root's, and
		// it handles SIGTERM and reaps orphans as PID 1 must
		// (runner/reaper.go).
		add("--init")
	}
	// The sandbox forwards signals itself (docker stop by name), which also
	// works when the docker client is gone.
	add("--sig-proxy=false")
	if s.Sealed {
		// stdin carries the job's result key to `kbgen run --sealed`, then
		// closes (package seal).
		add("--interactive")
	}

	// Without a GPU (NoGPU: a job run by hand on a machine with no GPU
	// runtime) the agent needs no GPU placement either.
	if !opts.NoGPU {
		grant, err := grantGPUs(cfg, pl, host)
		if err != nil {
			return nil, err
		}
		s.Lines = append(s.Lines, grant.flags...)
		s.GPUs = grant.ids
		// What the next job leased these GPUs looks for: a container a
		// SIGKILLed sandbox left running on them (removeStale).
		add("--label", GPUsLabel+"="+strings.Join(s.GPUs, ","))
	}

	var err error
	cpus := pl.CPUs
	if cfg.CPUs > 0 {
		if cpus, err = pickCPUs(pl.CPUs, cfg.CPUs, os.DirFS(host.SysfsRoot)); err != nil {
			return nil, refusal.Refusef("cpus: %v", err)
		}
	}
	if pl.CgroupParent != "" {
		// On a cgroup v2 node the host's slices are confined to the
		// housekeeping CPUs; the container must not inherit that.
		add("--cgroup-parent", pl.CgroupParent)
	}
	add("--cpuset-cpus", cpus.String())
	add("--cpuset-mems", pl.Mems.String())

	mem := pl.Memory
	if cfg.Memory != "" {
		if mem, err = size.Parse(cfg.Memory); err != nil {
			return nil, refusal.ConfigErrorf("memory", "%v", err)
		}
		if mem > pl.Memory {
			return nil, refusal.Refusef("memory: %s asked, this agent owns %s (%s)", mem, pl.Memory, contract.EnvMemory)
		}
	}
	add("--memory", mem.String())
	// Equal to --memory: no swap, so a memory hog is OOM-killed instead of
	// slowing the whole node down.
	add("--memory-swap", mem.String())

	shmCap := mem
	if pl.ShmMax > 0 {
		shmCap = min(pl.ShmMax, mem)
	}
	shm := min(DefaultShmSize, shmCap)
	if cfg.ShmSize != "" {
		if shm, err = size.Parse(cfg.ShmSize); err != nil {
			return nil, refusal.ConfigErrorf("shm-size", "%v", err)
		}
		if shm > shmCap {
			return nil, refusal.Refusef("shm-size: %s asked, this agent allows %s", shm, shmCap)
		}
	}

	pids := DefaultPidsLimit
	if pl.PidsMax > 0 {
		pids = min(pids, pl.PidsMax)
	}
	if cfg.PidsLimit > 0 {
		if pl.PidsMax > 0 && cfg.PidsLimit > pl.PidsMax {
			return nil, refusal.Refusef("pids-limit: %d asked, this agent allows %d (%s)", cfg.PidsLimit, pl.PidsMax, contract.EnvPidsMax)
		}
		pids = cfg.PidsLimit
	}
	add("--pids-limit", strconv.Itoa(pids))

	if cfg.Network != "" && cfg.Network != "none" {
		return nil, refusal.Refusef("network: %q asked, evaluation steps get no network (only \"none\")", cfg.Network)
	}
	add("--network", "none")
	add("--ipc", "private")
	add("--cap-drop", "ALL")
	add("--security-opt", "no-new-privileges")
	add("--read-only")
	add("--user", ContainerUser)
	uid, gid, _ := strings.Cut(ContainerUser, ":")
	// exec: the runner compiles and runs binaries here. The size is the
	// memory limit because tmpfs pages are charged to the container's
	// memory cgroup anyway; --memory is the real bound. Every writable
	// path is a tmpfs: nothing the job writes lands on the host's disk.
	add("--tmpfs", fmt.Sprintf("%s:rw,exec,nosuid,nodev,size=%s,nr_inodes=%d,uid=%s,gid=%s,mode=0700", ContainerWorkDir, mem.String(), ScratchInodes, uid, gid))
	add("--tmpfs", fmt.Sprintf("/tmp:rw,exec,nosuid,nodev,size=%s,nr_inodes=%d,mode=1777", mem.String(), ScratchInodes))
	add("--tmpfs", fmt.Sprintf("%s:rw,noexec,nosuid,nodev,size=%s,nr_inodes=%d,uid=%s,gid=%s,mode=0700", ContainerOutDir, min(OutDirSize, mem).String(), OutDirInodes, uid, gid))
	// /dev/shm as a tmpfs of ours instead of --shm-size, which sets only
	// the size: docker then mounts no shm of its own (the IPC namespace is
	// still private), and the inodes are bounded as the others are.
	// docker's own options (noexec, nosuid, nodev, mode 1777) are kept.
	add("--tmpfs", shmTmpfs(shm))
	add("--workdir", ContainerWorkDir)
	add("--mount", "type=bind,source="+opts.RunnerBinary+",target="+ContainerRunner+",readonly")
	if opts.NVMLHelper != "" && !opts.NoGPU && cfg.Runtime == contract.RuntimeNVIDIA {
		// Dynamically linked: it runs where the image's glibc is new
		// enough (2.34+), and the runner falls back to nvidia-smi where
		// it is not. Read-only, and not dumpable once started, like kbgen.
		add("--mount", "type=bind,source="+opts.NVMLHelper+",target="+ContainerNVMLHelper+",readonly")
	}
	if opts.PayloadFile != "" {
		add("--mount", "type=bind,source="+opts.PayloadFile+",target="+ContainerPayload+",readonly")
	}
	for _, e := range opts.Env {
		add("--env", e)
	}
	if !opts.NoGPU {
		// A container that was given a GPU but sees none is the machine's
		// fault: the runner then exits 75 and Buildkite retries elsewhere.
		add("--env", contract.EnvRequireGPU+"=1")
		// How many it was given: the runner's device_count and
		// POPCORN_GPUS (rocm-smi in a container lists every card of the
		// host, sysfs being shared).
		add("--env", contract.EnvGPUCount+"="+strconv.Itoa(len(s.GPUs)))
	}
	// The command's first word is the entrypoint, so an image's own
	// ENTRYPOINT (a runner image may use kbgen) never wraps our command.
	cmd := RunnerCommand(opts.Command)
	add("--entrypoint", cmd[0])
	add(cfg.Image)
	if len(cmd) > 1 {
		s.Lines = append(s.Lines, cmd[1:])
	}
	return s, nil
}

// RunnerCommand is the container's command. `kbgen run ...` is pointed at
// the mounted payload and out dir, told not to upload (the container has
// no network and no agent token; the plugin hook uploads on the host) and
// to seal its result (package seal). Any other command runs as given.
func RunnerCommand(cmd []string) []string {
	return runnerArgv(cmd, ContainerRunner, ContainerPayload, ContainerResult)
}

// runnerArgv is RunnerCommand with the runner, payload and result paths
// given (the process launcher's are the host's).
func runnerArgv(cmd []string, runner, payloadFile, result string) []string {
	if IsRunnerCommand(cmd) {
		out := []string{runner, "run", "--payload-file", payloadFile, "--out", result, "--no-upload", "--sealed"}
		return append(out, cmd[2:]...)
	}
	return slices.Clone(cmd)
}

// IsRunnerCommand reports whether cmd is `kbgen run`, which needs a payload.
func IsRunnerCommand(cmd []string) bool {
	return len(cmd) >= 2 && (cmd[0] == "kbgen" || cmd[0] == ContainerRunner) && cmd[1] == "run"
}

// AllowedEnv are the host variables passed into the container, by name.
// An allow-list: the agent's token, the build's secrets and the payload
// itself (it travels as a file) never get in, whatever they are called.
// The noise policy holds thresholds only; the runner needs it to judge
// and retry (package noise).
var AllowedEnv = []string{contract.EnvRunID, contract.EnvNoisePolicy}

// ContainerEnv is the container's whole environment: fixed entries plus
// the allowed host variables that are set, plus the job's retry count
// (BUILDKITE_RETRY_COUNT, renamed: no BUILDKITE_* variable gets in) so
// the runner retries external noise only once.
func ContainerEnv(lookup func(string) (string, bool)) []string {
	env := []string{"HOME=/tmp", "TMPDIR=/tmp", contract.EnvInSandbox + "=1"}
	for _, k := range AllowedEnv {
		if v, ok := lookup(k); ok && v != "" && !strings.ContainsAny(v, "\n\x00") {
			env = append(env, k+"="+v)
		}
	}
	if v, ok := lookup(contract.EnvBuildkiteRetryCount); ok {
		if _, err := strconv.Atoi(v); err == nil {
			env = append(env, contract.EnvRetryCount+"="+v)
		}
	}
	return env
}

var nameUnsafe = lazyre.New(`[^A-Za-z0-9_.-]`)

// ContainerName is the container's name for a job: deterministic, so a
// container left behind by a killed job is found and removed by the next
// run on the agent.
func ContainerName(jobID string) string {
	return "kbgen-" + nameUnsafe.ReplaceAllString(jobID, "_")
}
