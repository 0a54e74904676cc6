package dockerargv

import (
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/size"
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
