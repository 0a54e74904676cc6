package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/e2e"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// runE2E is `kbgen doctor --e2e`: the example job through a local
// Buildkite and this node's own agent config.
func (c *DoctorCmd) runE2E(ctx context.Context, g *Globals) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding kbgen's own binary: %w", err)
	}
	agent, err := bkagent.Installed(g.Getenv)
	if err != nil {
		return withCode(exitcode.Failure, fmt.Errorf("doctor --e2e: %w", err))
	}
	rep, err := e2e.RunDoctor(ctx, e2e.DoctorOptions{
		Root: c.Root, GPU: c.GPU, Kbgen: exe, AgentBinary: agent, Image: c.Image, Timeout: c.Timeout,
		Progress: func(format string, args ...any) { fmt.Fprintf(g.Stderr, "kbgen doctor: "+format+"\n", args...) },
	})
	if err != nil {
		return withCode(exitcode.Failure, fmt.Errorf("doctor --e2e: %w", err))
	}
	fmt.Fprintf(g.Stdout, "kbgen %s → exit %d in %.1f s\n", strings.Join(rep.SubmitArgs, " "), rep.ExitCode, rep.Total.Seconds())
	for _, j := range rep.Jobs {
		exit := "-"
		if j.Exit != nil {
			exit = fmt.Sprint(*j.Exit)
		}
		fmt.Fprintf(g.Stdout, "\njob %s on %s: %s (exit %s), accept → finish %.2f s\n%s", j.Key, j.Agent, j.State, exit,
			j.Finished.Sub(j.Accepted).Seconds(), e2e.FormatPhases(e2e.Phases(j.Log, j.Accepted, j.Finished)))
	}
	fmt.Fprintf(g.Stdout, "\nresult:\n%s\n", strings.TrimSpace(rep.Result))
	if rep.ExitCode != 0 {
		fmt.Fprintf(g.Stderr, "%s\n", strings.TrimSpace(rep.Stderr))
		for _, j := range rep.Jobs {
			if j.State != "passed" {
				fmt.Fprintf(g.Stderr, "--- log of job %s (%s):\n%s\n", j.Key, j.State, lastLines(j.Log, 30))
			}
		}
		return withCode(exitcode.Failure, fmt.Errorf("doctor --e2e: the example job did not come back through this node's agent (kbgen submit exit %d)", rep.ExitCode))
	}
	fmt.Fprintln(g.Stdout, "PASS  e2e: the example job ran through this node's agent config and came back")
	return nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
