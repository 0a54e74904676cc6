package dockerargv

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/shellquote"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/sandbox/process"
)

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
	// Process, when set, is a process launcher's run (sandbox.LauncherProcess);
	// Lines are then its setpriv equivalent, for the dry run.
	Process *process.Spec
}

// add appends argv lines.
func (s *Spec) add(lines ...[]string) { s.Lines = append(s.Lines, lines...) }

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
		return s.Name + ": " + s.Process.Summary()
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
