package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/syncbuf"
)

// AgentSpec is one `buildkite-agent start` to run.
type AgentSpec struct {
	Binary   string // buildkite-agent
	Name     string
	Endpoint string // the Agent API, ending in /v3
	Token    string // registration token
	// Config is the agent's config file (a node agent's rendered
	// buildkite-agent.cfg); empty runs with flags only.
	Config string
	// Tags when Config names none, e.g. "queue=kernelbot-control".
	Tags string
	// Dir holds the agent's builds, hooks and plugins directories; the
	// config's own paths are overridden.
	Dir string
	// Env is added to the agent's environment (which every job inherits).
	Env []string
	// Args are more `buildkite-agent start` flags.
	Args []string
}

// Agent is a running agent process.
type Agent struct {
	Name string
	cmd  *exec.Cmd
	log  *syncbuf.Buffer
	done chan struct{}
	err  error
}

// StartAgent starts the agent in its own process group, so Stop and Kill
// reach it alone and Cleanup reaches every job it left behind.
func StartAgent(spec AgentSpec) (*Agent, error) {
	args := []string{"start", "--name", spec.Name, "--endpoint", spec.Endpoint, "--token", spec.Token,
		"--no-color", "--no-ssh-keyscan", "--cancel-grace-period", "5", "--log-format", "text"}
	if spec.Tags != "" {
		args = append(args, "--tags", spec.Tags)
	}
	env := append(os.Environ(), spec.Env...)
	for _, d := range []string{"builds", "hooks", "plugins"} {
		if err := os.MkdirAll(filepath.Join(spec.Dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	cfg := spec.Config
	if cfg == "" {
		cfg = filepath.Join(spec.Dir, "buildkite-agent.cfg")
		if err := os.WriteFile(cfg, []byte("# flags only\n"), 0o644); err != nil {
			return nil, err
		}
	}
	// The flags override the config's paths: builds and plugins stay in
	// Dir, and the hooks are Dir's copy (see PrepareNodeAgent).
	args = append(args, "--config", cfg, "--build-path", filepath.Join(spec.Dir, "builds"),
		"--hooks-path", filepath.Join(spec.Dir, "hooks"), "--plugins-path", filepath.Join(spec.Dir, "plugins"))
	cmd := exec.Command(spec.Binary, append(args, spec.Args...)...)
	cmd.Env = env
	log := &syncbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting agent %s: %w", spec.Name, err)
	}
	a := &Agent{Name: spec.Name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() { a.err = cmd.Wait(); close(a.done) }()
	return a, nil
}

// Log is what the agent printed so far.
func (a *Agent) Log() string { return a.log.String() }

// Pid is the agent process's id (its process group's too).
func (a *Agent) Pid() int { return a.cmd.Process.Pid }

// Kill SIGKILLs the agent process alone, as a crash or the OOM killer
// would: its running job is left to the server to declare lost.
func (a *Agent) Kill() { _ = a.cmd.Process.Kill(); <-a.done }

// Stop asks the agent to finish and disconnect (SIGTERM), waiting up to
// grace before killing its whole process group.
func (a *Agent) Stop(grace time.Duration) error {
	select {
	case <-a.done:
		return nil
	default:
	}
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-a.done:
	case <-time.After(grace):
		_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
		<-a.done
		return fmt.Errorf("agent %s did not stop within %s; killed", a.Name, grace)
	}
	var ee *exec.ExitError
	if a.err != nil && !errors.As(a.err, &ee) {
		return a.err
	}
	return nil
}

// Cleanup kills whatever is left of the agent's process group.
func (a *Agent) Cleanup() {
	_ = syscall.Kill(-a.cmd.Process.Pid, syscall.SIGKILL)
	<-a.done
}

// Exited reports whether the agent process has ended.
func (a *Agent) Exited() bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

// gitEnv makes commits without a configured identity.
var gitEnv = []string{"GIT_AUTHOR_NAME=kbgen", "GIT_AUTHOR_EMAIL=kbgen@localhost", "GIT_COMMITTER_NAME=kbgen", "GIT_COMMITTER_EMAIL=kbgen@localhost"}

// MakeRepo writes the pipeline's repository into dir: the .buildkite
// directory of src (the bootstrap pipeline and the gpu-docker plugin),
// committed on branch main. A small repository of its own, not src
// itself, so that a checkout is fast and sees the working tree's files
// whether or not they are committed.
func MakeRepo(dir, src string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if out, err := exec.Command("cp", "-R", filepath.Join(src, ".buildkite"), dir).CombinedOutput(); err != nil {
		return fmt.Errorf("copying .buildkite: %v: %s", err, out)
	}
	return commitAll(dir)
}
