// Command kbgen-e2e proves the whole Buildkite path on a vendor node
// (`kbgen doctor --e2e` runs it), and serves the same local Buildkite for
// an operator's rehearsal (kbgen-e2e buildkite). It lives outside the kbgen binary because
// it links a local Buildkite (internal/fakebuildkite, net/http/httptest),
// which every kbgen start-up would otherwise pay for and which a shipped
// runner binary has no use for.
//
// Like cmd/kbgen it only parses flags, calls one package function
// (e2e.RunDoctor, e2e.StartRehearsal) and prints; exit codes come from internal/exitcode.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alecthomas/kong"

	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// CLI is kbgen-e2e's commands.
type CLI struct {
	Doctor    DoctorCmd    `cmd:"" help:"Run the example job through a local Buildkite and this node's own agent config (kbgen doctor --e2e)."`
	Buildkite BuildkiteCmd `cmd:"" help:"Serve a local Buildkite (REST and Agent API) with agents from staged installs, for an operator's rehearsal without a Buildkite account."`
}

// stdio is this process's streams and environment, handed to every command.
type stdio struct {
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

func main() {
	os.Exit(run(os.Args[1:], &stdio{Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv}))
}

// exitRequest carries an exit code out of kong's help/usage handling.
type exitRequest int

func run(args []string, s *stdio) (code int) {
	var cli CLI
	parser, err := kong.New(&cli,
		kong.Name("kbgen-e2e"),
		kong.Description("kbgen-e2e proves the whole Buildkite path on a vendor node with a local Buildkite (kbgen doctor --e2e runs it), and serves that local Buildkite for an operator's rehearsal."),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Writers(s.Stdout, s.Stderr),
		kong.Exit(func(c int) { panic(exitRequest(c)) }),
		kong.Bind(s),
	)
	if err != nil {
		fmt.Fprintf(s.Stderr, "kbgen-e2e: %v\n", err)
		return exitcode.Failure
	}
	defer func() {
		if r := recover(); r != nil {
			req, ok := r.(exitRequest)
			if !ok {
				panic(r)
			}
			code = exitcode.OK
			if req != 0 {
				code = exitcode.Usage
			}
		}
	}()
	ctx, err := parser.Parse(args)
	if err != nil {
		fmt.Fprintf(s.Stderr, "kbgen-e2e: %v\n", err)
		return exitcode.Usage
	}
	if err := ctx.Run(s); err != nil {
		fmt.Fprintf(s.Stderr, "kbgen-e2e: %v\n", err)
		return exitcode.Failure
	}
	return exitcode.OK
}

// signalContext ends at the timeout, or at SIGINT or SIGTERM so the
// temporary agent and local Buildkite are removed on the way out.
func signalContext(timeout time.Duration) (context.Context, context.CancelFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	return ctx, func() { cancel(); stop() }
}
