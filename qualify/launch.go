package qualify

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/sandbox"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// Launcher runs kbgen's calibration on an agent's placement.
type Launcher interface {
	Name() string
	// Calibrate runs `kbgen node calibrate ARGS` there and returns its
	// stdout (the Calibration JSON).
	Calibrate(ctx context.Context, a node.Agent, args []string) ([]byte, error)
	// StartLoad starts the CPU + memory load there for at most d; stop
	// ends it and waits.
	StartLoad(ctx context.Context, a node.Agent, d time.Duration) (stop func(), err error)
}

// Docker runs each calibration and load in a container planned by the
// sandbox from the agent's placement: the same cpuset, NUMA node, memory,
// cgroup parent and (unless NoGPU) GPU a step gets.
type Docker struct {
	Plan  *node.Plan
	Image string
	// RunnerBinary is the host's static kbgen, mounted into the container.
	RunnerBinary string
	Host         dockerargv.Host
	NoGPU        bool
	// Tag makes container names unique to this qualification.
	Tag string
}

func (d *Docker) Name() string { return "sandbox (docker)" }

func (d *Docker) spec(a node.Agent, name string, args []string) (*dockerargv.Spec, error) {
	spec, err := sandbox.OnPlacement{
		Placement:    a.EnvLookup(d.Plan.Runtime, d.Plan.CgroupVersion),
		Image:        d.Image,
		Runtime:      d.Plan.Runtime,
		Host:         d.Host,
		Name:         name,
		Command:      append([]string{dockerargv.ContainerRunner, "node", "calibrate"}, args...),
		RunnerBinary: d.RunnerBinary,
		NoGPU:        d.NoGPU,
	}.DockerRun()
	if err != nil {
		return nil, fmt.Errorf("the sandbox refuses %s's placement: %w", a.ID, err)
	}
	return spec, nil
}

func (d *Docker) Calibrate(ctx context.Context, a node.Agent, args []string) ([]byte, error) {
	name := "kbgen-qualify-" + d.Tag + "-" + a.ID
	spec, err := d.spec(a, name, args)
	if err != nil {
		return nil, err
	}
	defer removeContainer(name)
	return run(exec.CommandContext(ctx, "docker", spec.Argv()...))
}

func (d *Docker) StartLoad(ctx context.Context, a node.Agent, dur time.Duration) (func(), error) {
	name := "kbgen-qualify-" + d.Tag + "-load-" + a.ID
	spec, err := d.spec(a, name, []string{"--load", "--duration", dur.String()})
	if err != nil {
		return nil, err
	}
	cmd := exec.Command("docker", spec.Argv()...)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {
		removeContainer(name)
		_ = cmd.Wait()
	}, nil
}

func removeContainer(name string) {
	_ = exec.Command("docker", "rm", "--force", name).Run()
}

// Direct runs the calibration and the load as processes of this host
// pinned to the agent's CPUs (sched_setaffinity): for a host without
// docker, or to compare with the sandbox.
type Direct struct {
	// Binary is this kbgen.
	Binary string
}

func (d *Direct) Name() string { return "direct (pinned processes, no sandbox)" }

func (d *Direct) Calibrate(ctx context.Context, a node.Agent, args []string) ([]byte, error) {
	args = append([]string{"node", "calibrate", "--cpus", a.CPUSet}, args...)
	cmd := exec.CommandContext(ctx, d.Binary, args...)
	cmd.Env = append(os.Environ(), contract.EnvGPUUUID+"="+a.GPU.UUID)
	return run(cmd)
}

func (d *Direct) StartLoad(ctx context.Context, a node.Agent, dur time.Duration) (func(), error) {
	cmd := exec.Command(d.Binary, "node", "calibrate", "--load", "--cpus", a.CPUSet, "--duration", dur.String())
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	}, nil
}

// run returns stdout, or an error carrying the reason stderr gives.
func run(cmd *exec.Cmd) ([]byte, error) {
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		return out.Bytes(), fmt.Errorf("%s: %w: %s", cmd.Args[0], err, failureReason(errb.String()))
	}
	return out.Bytes(), nil
}

// dockerHint is the line docker's CLI adds after every failed `docker run`
// ("Run 'docker run --help' for more information", older ones "See
// 'docker run --help'."): it is never the reason.
var dockerHint = regexp.MustCompile(`^(Run|See) '[^']*--help'( for more information)?\.?$`)

// failureReason is the last line of stderr that says something: the
// daemon's error ("docker: Error response from daemon: could not select
// device driver ..."), not docker's closing hint or a blank line.
func failureReason(stderr string) string {
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		l := strings.TrimSpace(lines[i])
		if l != "" && !dockerHint.MatchString(l) {
			return l
		}
	}
	return "(nothing on stderr)"
}
