package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/process"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// DockerExitInfra is docker run's own failure (daemon error, bad flag,
// image missing, name conflict): the container never ran.
const DockerExitInfra = 125

// DefaultStopTimeout is the runner's time to write its result after
// SIGTERM before docker kills it; below the agent's default
// cancel-grace-period (10s), so the container is gone before the agent
// gives up on the job.
const DefaultStopTimeout = 5 * time.Second

// Launcher runs a planned Spec: a container with the docker CLI, or a
// process spec (Spec.Process) as its own unprivileged uid beside the
// sandbox (process.go, the Kubernetes backend's). Either way the step's
// stdin, stdout and stderr are these, and signals are forwarded the same.
type Launcher struct {
	// Docker is the docker CLI; "" means "docker" on PATH.
	Docker string
	// Env is the docker CLI's environment (DOCKER_HOST, DOCKER_CONFIG, …;
	// os.Environ form); nil means this process's.
	Env []string
	// Stdin, when set, is the container's stdin (the plan must have
	// --interactive); nil gives it none.
	Stdin io.Reader
	// Stdout and Stderr receive the container's output.
	Stdout, Stderr io.Writer
	// Log receives the launcher's own notes (stale container removed,
	// signal forwarded). nil discards them.
	Log io.Writer
	// Signals, when set, delivers the signals to forward: the first one
	// stops the container (SIGTERM, then SIGKILL after StopTimeout), a
	// second one kills it at once.
	Signals <-chan os.Signal
	// StopTimeout is docker stop's grace period; 0 means DefaultStopTimeout.
	StopTimeout time.Duration
}

func (l *Launcher) docker() string {
	if l.Docker != "" {
		return l.Docker
	}
	return "docker"
}

func (l *Launcher) logf(format string, args ...any) {
	if l.Log != nil {
		fmt.Fprintf(l.Log, format+"\n", args...)
	}
}

// Run runs the spec (RemoveStale has removed what an earlier job left
// behind) and returns the container's exit code (docker run's: 125 when
// docker itself failed, 128+n when the container died of signal n). err
// is set only when docker could not be started at all.
func (l *Launcher) Run(ctx context.Context, spec *dockerargv.Spec) (int, error) {
	code, _, err := l.run(ctx, spec)
	return code, err
}

// run is Run, and how the run ended (for the words on a 137).
func (l *Launcher) run(ctx context.Context, spec *dockerargv.Spec) (int, ending, error) {
	if spec.Process != nil {
		code, err := process.Run(ctx, spec.Process, process.IO{Stdin: l.Stdin, Stdout: l.Stdout, Stderr: l.Stderr, Signals: l.Signals, StopTimeout: l.stopTimeout(), Logf: l.logf})
		return code, ending{}, err
	}
	docker, err := exec.LookPath(l.docker())
	if err != nil {
		return 0, ending{}, refusal.Refusef("no docker CLI on this agent: %v", err)
	}
	cmd := exec.CommandContext(ctx, docker, spec.Argv()...)
	cmd.Env = l.Env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = l.Stdin, l.Stdout, l.Stderr
	// Own process group: a signal to the job's group reaches us, not the
	// docker client, so the client keeps streaming until the container
	// has really stopped.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return 0, ending{}, refusal.Refusef("starting docker: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	end := ending{Engine: true}
	for {
		select {
		case err := <-done:
			code, cerr := exitCode(cmd, err)
			if !removed(spec, end.Stopped != nil, code, cerr) {
				_ = l.quiet(context.WithoutCancel(ctx), docker, "rm", "--force", spec.Name)
			}
			if code == 137 && cerr == nil && !end.Killed {
				end.OOM, end.OOMErr = l.oomKilled(ctx, docker, spec.Name, start)
			}
			return code, end, cerr
		case sig := <-l.Signals:
			l.forward(ctx, docker, spec.Name, sig, &end)
		}
	}
}

// forward passes a signal to the container: the first stops it (docker
// stop: SIGTERM, SIGKILL after the grace period), a second kills it.
func (l *Launcher) forward(ctx context.Context, docker, name string, sig os.Signal, end *ending) {
	if end.Stopped == nil {
		end.Stopped = sig
		l.logf("kbgen sandbox: %v: stopping container %s", sig, name)
		go func() { _ = l.quiet(context.WithoutCancel(ctx), docker, "stop", "--time", l.stopSeconds(), name) }()
		return
	}
	end.Killed = true
	l.logf("kbgen sandbox: %v again: killing container %s", sig, name)
	go func() { _ = l.quiet(context.WithoutCancel(ctx), docker, "kill", name) }()
}

// removed reports whether the container is surely gone when docker run
// has returned: with --rm the client waits until the daemon has removed
// it (the CLI's wait condition "removed"), so a client that exited on its
// own with the container's status (below 125) leaves nothing, and the
// extra `docker rm` (0.15-0.25 s on a loaded node, after every job) is
// spared. A client that died, docker's own failure (125 and up, also a
// failed removal), or a stop or kill sent meanwhile still gets it.
func removed(spec *dockerargv.Spec, stopped bool, code int, err error) bool {
	if stopped || err != nil || code >= DockerExitInfra {
		return false
	}
	for _, l := range spec.Lines {
		if len(l) == 1 && l[0] == "--rm" {
			return true
		}
	}
	return false
}

func (l *Launcher) stopTimeout() time.Duration {
	if l.StopTimeout <= 0 {
		return DefaultStopTimeout
	}
	return l.StopTimeout
}

func (l *Launcher) stopSeconds() string {
	return strconv.Itoa(int(l.stopTimeout().Round(time.Second) / time.Second))
}

// quiet runs a docker housekeeping command, discarding its output. Its
// own process group: when the agent kills the job's group after its grace
// period, a `docker stop` already under way still finishes.
func (l *Launcher) quiet(ctx context.Context, docker string, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, docker, args...)
	cmd.Env = l.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	return cmd.Run()
}

func exitCode(cmd *exec.Cmd, err error) (int, error) {
	if err == nil {
		return 0, nil
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		return 0, fmt.Errorf("running docker: %w", err)
	}
	if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ee.ExitCode(), nil
}
