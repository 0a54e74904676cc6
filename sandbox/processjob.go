package sandbox

import (
	"cmp"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/process"
)

// How kbgen sandbox runs a step (`--launcher`).
const (
	// LauncherDocker is a `docker run` on a gpu-docker node (package
	// dockerargv).
	LauncherDocker = "docker"
	// LauncherProcess is a process under its own uid beside the sandbox,
	// in the container the sandbox itself runs in: the Kubernetes
	// backend's step (package process).
	LauncherProcess = "process"
)

// newProcessJob plans a step for the process launcher: no gpu-docker
// config and no placement (in a pod the scheduler placed it and the
// cgroup bounds it), the payload staged where the process can read it.
func newProcessJob(step Step, req Request) (*Job, error) {
	runner, err := runnerBinary(req.RunnerBinary)
	if err != nil {
		return nil, err
	}
	base, err := step.stageBase()
	if err != nil {
		return nil, fmt.Errorf("stage dir: %w", err)
	}
	name := dockerargv.ContainerName(step.Job.jobID)
	stage := NewStage(base, name, step.Job.hasPayload)
	// The process reads the payload as its own uid: the stage is
	// traversable (not listable), the payload 0444 as on docker nodes.
	stage.Mode = 0o711
	dir := cmp.Or(req.WorkDir, dockerargv.ContainerWorkDir)
	p := &process.Spec{UID: step.UID, GID: step.GID, Dir: dir, Env: step.Env, Protect: req.Protect, Sticky: []string{dir, "/tmp", "/dev/shm"}}
	result := filepath.Join(dir, ".kbgen-out", contract.ResultFile)
	p.Argv = dockerargv.RunnerArgv(req.Command, runner, stage.PayloadFile, result)
	if !step.NoGPU {
		p.Groups = deviceGroups(req.host())
	}
	spec := &dockerargv.Spec{Name: name, Program: "setpriv", Sealed: dockerargv.IsRunnerCommand(req.Command), Process: p}
	spec.Lines = p.Lines()
	return &Job{Spec: spec, Stage: stage, Runner: runner, payload: step.Job.encoded, policy: step.Policy}, nil
}

// ParseUser reads "UID:GID" (numbers; GID defaults to UID). Root is
// refused: the point is a uid that holds nothing.
func ParseUser(s string) (uid, gid int, err error) {
	if s == "" {
		s = dockerargv.ContainerUser
	}
	u, g, hasGID := strings.Cut(s, ":")
	if !hasGID {
		g = u
	}
	uid, uerr := strconv.Atoi(u)
	gid, gerr := strconv.Atoi(g)
	switch {
	case uerr != nil || gerr != nil || uid < 0 || gid < 0:
		return 0, 0, fmt.Errorf("%q is not UID:GID in numbers, like %s", s, dockerargv.ContainerUser)
	case uid == 0 || gid == 0:
		return 0, 0, fmt.Errorf("%q: the step never runs as root's uid or gid", s)
	}
	return uid, gid, nil
}

// deviceGroups are the groups of the GPU device files a ROCm process
// opens (docker's --group-add on a gpu-docker node); root's group never.
func deviceGroups(host dockerargv.Host) []int {
	if host.Stat == nil {
		host.Stat = dockerargv.LocalHost().Stat
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
