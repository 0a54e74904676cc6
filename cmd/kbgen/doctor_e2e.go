package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"syscall"

	"github.com/gpu-mode/kbgen/internal/companion"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// runE2E is `kbgen doctor --e2e`: it runs the kbgen-e2e companion binary,
// which holds the local Buildkite so that this binary does not link it
// (every kbgen start-up, the bootstrap's generate included, paid for it).
func (c *DoctorCmd) runE2E(g *Globals) error {
	bin, ok := companion.Find(companion.E2E, g.Getenv("PATH"))
	if !ok {
		return exitcode.With(exitcode.Failure, fmt.Errorf("doctor --e2e needs %s beside kbgen or on PATH (the local Buildkite is not linked into kbgen): install the release's kbgen-e2e-VERSION-linux-ARCH there as %s (setup-node.sh does, with KBGEN_BINARY), or from a checkout: %s",
			companion.E2E, companion.E2E, companion.BuildHint(companion.E2E)))
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding kbgen's own binary: %w", err)
	}
	args := []string{"doctor", "--kbgen", self, "--root", c.Root, "--gpu", fmt.Sprint(c.GPU), "--timeout", c.Timeout.String()}
	if c.Image != "" {
		args = append(args, "--image", c.Image)
	}
	return runCompanion(g, bin, args)
}

// runCompanion runs bin with g's streams and environment and ends with its
// exit status. SIGINT and SIGTERM are passed on rather than ending kbgen
// first, so the companion can remove what it started.
func runCompanion(g *Globals, bin string, args []string) error {
	cmd := exec.Command(bin, args...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr, cmd.Env = g.Stdin, g.Stdout, g.Stderr, g.Environ()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return exitcode.With(exitcode.Failure, fmt.Errorf("starting %s: %w", bin, err))
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err := cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return exitcode.Silent(ee.ExitCode())
	case errors.As(err, &ee):
		return exitcode.With(exitcode.Failure, fmt.Errorf("%s: %v", companion.E2E, err)) // killed by a signal
	}
	return exitcode.With(exitcode.Failure, fmt.Errorf("%s: %w", companion.E2E, err))
}
