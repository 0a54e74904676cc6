package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/companion"
	"github.com/gpu-mode/kbgen/internal/e2e"
)

// DoctorCmd is `kbgen doctor --e2e`: the example job through a local
// Buildkite and this node's own agent config.
type DoctorCmd struct {
	Kbgen   string        `placeholder:"FILE" help:"The kbgen binary the agent runs (its directory goes first on the agent's PATH). Default: kbgen beside this binary, else on PATH. kbgen doctor --e2e passes itself."`
	Root    string        `default:"/" placeholder:"DIR" help:"The machine's root: where kbgen node install wrote the node. Example: --root /"`
	GPU     int           `name:"gpu" default:"0" placeholder:"N" help:"The GPU whose agent config is used. Example: --gpu 3"`
	Image   string        `placeholder:"IMAGE" help:"Runner image for the job (kbgen submit --image). Default: the vendor registry's image for the node's queue."`
	Timeout time.Duration `default:"5m" help:"Give up after this long. Example: --timeout 10m"`
}

// Help is shown after the flags.
func (c *DoctorCmd) Help() string {
	return `Starts a local Buildkite and one temporary agent with this node's real
config, environment and hooks for --gpu, runs the example job through
kbgen submit, prints its FullResult and the time each phase took, and
removes everything. Needs buildkite-agent, git and docker.

  sudo kbgen doctor --e2e --gpu 0

Exit status 0 when the example came back through the agent, 1 otherwise.`
}

func (c *DoctorCmd) Run(s *stdio) error {
	kbgen, err := c.kbgen(s.Getenv)
	if err != nil {
		return err
	}
	agent, err := bkagent.Installed(s.Getenv)
	if err != nil {
		return fmt.Errorf("doctor --e2e: %w", err)
	}
	ctx, cancel := signalContext(c.Timeout)
	defer cancel()
	rep, err := e2e.RunDoctor(ctx, e2e.DoctorOptions{
		Root: c.Root, GPU: c.GPU, Kbgen: kbgen, AgentBinary: agent, Image: c.Image, Timeout: c.Timeout,
		Progress: func(format string, args ...any) { fmt.Fprintf(s.Stderr, "kbgen doctor: "+format+"\n", args...) },
	})
	if err != nil {
		return fmt.Errorf("doctor --e2e: %w", err)
	}
	printReport(s, rep)
	if rep.ExitCode != 0 {
		return fmt.Errorf("doctor --e2e: the example job did not come back through this node's agent (kbgen submit exit %d)", rep.ExitCode)
	}
	fmt.Fprintln(s.Stdout, "PASS  e2e: the example job ran through this node's agent config and came back")
	return nil
}

// kbgen is the kbgen binary to run: --kbgen, else the one beside this
// binary (where kbgen looks for kbgen-e2e), else kbgen on PATH.
func (c *DoctorCmd) kbgen(getenv func(string) string) (string, error) {
	if c.Kbgen != "" {
		return filepath.Abs(c.Kbgen)
	}
	if p, ok := companion.Find(companion.Kbgen, getenv("PATH")); ok {
		return p, nil
	}
	return "", errors.New("doctor --e2e: no kbgen beside kbgen-e2e or on PATH (give --kbgen FILE)")
}

// printReport prints the submit's outcome, each job's phases and the
// FullResult; on failure the submit's stderr and the failed jobs' logs.
func printReport(s *stdio, rep *e2e.DoctorReport) {
	fmt.Fprintf(s.Stdout, "kbgen %s → exit %d in %.1f s\n", strings.Join(rep.SubmitArgs, " "), rep.ExitCode, rep.Total.Seconds())
	for _, j := range rep.Jobs {
		exit := "-"
		if j.Exit != nil {
			exit = fmt.Sprint(*j.Exit)
		}
		fmt.Fprintf(s.Stdout, "\njob %s on %s: %s (exit %s), accept → finish %.2f s\n%s", j.Key, j.Agent, j.State, exit,
			j.Finished.Sub(j.Accepted).Seconds(), e2e.FormatPhases(e2e.Phases(j.Log, j.Accepted, j.Finished)))
	}
	fmt.Fprintf(s.Stdout, "\nresult:\n%s\n", strings.TrimSpace(rep.Result))
	if rep.ExitCode == 0 {
		return
	}
	fmt.Fprintf(s.Stderr, "%s\n", strings.TrimSpace(rep.Stderr))
	for _, j := range rep.Jobs {
		if j.State != "passed" {
			fmt.Fprintf(s.Stderr, "--- log of job %s (%s):\n%s\n", j.Key, j.State, lastLines(j.Log, 30))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
