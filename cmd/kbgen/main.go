// Command kbgen runs Kernelbot submissions on vendor GPUs through Buildkite.
//
// This package only parses flags and the environment, calls the packages
// that do the work, prints, and picks exit codes (internal/exitcode).
package main

import (
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/alecthomas/kong"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/version"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/nvmlhelper"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/sandbox"
	"github.com/gpu-mode/kbgen/serve"
)

// Globals are handed to every command's Run method. Env is the only
// source of environment in this package: commands read it through
// Getenv/LookupEnv and hand Environ() to the packages that start processes
// (the runner, the agent CLI), so an in-process test controls all of it.
type Globals struct {
	Stdin  io.Reader `kong:"-"`
	Stdout io.Writer `kong:"-"`
	Stderr io.Writer `kong:"-"`
	// Env is the process environment, os.Environ form.
	Env []string `kong:"-"`
}

// LookupEnv is os.LookupEnv over g.Env: the last entry for key wins.
func (g *Globals) LookupEnv(key string) (string, bool) {
	return contract.EnvironLookup(g.Env)(key)
}

// Getenv returns the value of key, or "".
func (g *Globals) Getenv(key string) string {
	v, _ := g.LookupEnv(key)
	return v
}

// Environ is a copy of the whole environment, for a child process.
func (g *Globals) Environ() []string { return slices.Clone(g.Env) }

// NVML is the kbgen-nvml helper beside this kbgen (or named by
// KBGEN_NVML_HELPER), or why there is none.
func (g *Globals) NVML() nvmlhelper.Location {
	exe, _ := os.Executable()
	return nvmlhelper.Locate(g.LookupEnv, exe)
}

// CLI is every kbgen command. Each lives in its own file.
type CLI struct {
	// A newcomer's commands first: they need no Buildkite, Docker or GPU.
	Local   LocalCmd   `cmd:"" help:"Start here: run a whole job on this machine (the built-in example by default); no Buildkite, Docker or GPU needed."`
	Preview PreviewCmd `cmd:"" help:"Show a vendor exactly what a job would run on its hardware."`
	Vendors VendorsCmd `cmd:"" help:"List the vendor registry: queue, GPU, runtime, arch, image."`
	Encode  EncodeCmd  `cmd:"" help:"Encode a JSON job config as a Kernelbot payload (base64(zlib(json)))."`
	Decode  DecodeCmd  `cmd:"" help:"Decode a Kernelbot payload to its JSON job config."`

	// A vendor's node.
	Node    NodeCmd    `cmd:"" help:"Plan and install one isolated Buildkite agent per GPU on this node."`
	Doctor  DoctorCmd  `cmd:"" help:"Check this vendor node: driver, docker, GPU runtime, agents, plugin pin, isolation. With --buildkite: the Buildkite organization's pipeline, token, queues and limits."`
	Sandbox SandboxCmd `cmd:"" help:"Launch a step's container with this agent's GPU, CPUs and limits (agent host side)."`
	Run     RunCmd     `cmd:"" help:"Evaluate a job here (inside the container) and write result.json."`

	// Kernelbot's backend.
	Serve  ServeCmd  `cmd:"" help:"Run the service the Kernelbot backend talks to: one watcher, an API budget, webhooks."`
	Health HealthCmd `cmd:"" help:"Ask a kbgen serve whether it is healthy (its container's health check: exit 0 healthy, 4 not)."`
	Submit SubmitCmd `cmd:"" help:"Submit a job as a Buildkite build, wait, and print its FullResult JSON."`
	Wait   WaitCmd   `cmd:"" help:"Re-attach to a build, wait for it to finish, and print its FullResult."`
	Result ResultCmd `cmd:"" help:"Fetch the FullResult of a finished build."`
	Queues QueuesCmd `cmd:"" help:"Show agents per queue (idle, busy) and builds waiting."`
	Verify VerifyCmd `cmd:"" help:"Re-measure a finished run on other agents of its hardware through kbgen serve: confirm a record before it is announced."`

	// The bootstrap step and the operators.
	Generate GenerateCmd `cmd:"" help:"Print (or upload) the Buildkite pipeline for the job in the build env (the bootstrap step runs it)."`
	Keygen   KeygenCmd   `cmd:"" help:"Write a JWKS key pair for signing pipelines."`
	Version  VersionCmd  `cmd:"" help:"Print kbgen's version, commit, build date and the supported buildkite-agent versions."`
}

// cliVars are the ${names} the commands' help and defaults use.
func cliVars() kong.Vars {
	return kong.Vars{"version": version.Version, "result_file": contract.ResultFile, "modes": payload.ModeList(), "agent_cli": bkagent.Binary, "agent_binary": node.DefaultAgentBinary, "stop_timeout": sandbox.DefaultStopTimeout.String(),
		"api_budget": strconv.Itoa(serve.DefaultAPIBudget), "user_budget": strconv.Itoa(serve.DefaultPerUser),
		"org_limit": strconv.Itoa(client.OrgLimit), "user_limit": strconv.Itoa(client.UserLimit), "control_queue": contract.ControlQueue, "canary_example": canaryExample,
		"api_scopes": strings.Join(contract.APIScopeNames(), ", ")}
}

// exitRequest carries an exit code out of kong's help/usage handling.
type exitRequest int

func main() {
	os.Exit(realMain(os.Args[1:]))
}

// realMain reads os.Stdin/Stdout/Stderr at call time so in-process CLI
// tests (go-cmdtest) can capture them.
func realMain(args []string) int {
	return runCLI(&Globals{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Env: os.Environ()}, args)
}

// runCLI parses args and runs the command with g's streams and env.
func runCLI(g *Globals, args []string) (code int) {
	parser, err := kong.New(grammarFor(args),
		kong.Name("kbgen"),
		kong.Description("kbgen runs Kernelbot GPU-kernel submissions on vendor-donated hardware through Buildkite, one isolated GPU per job.\n\nNew here? Run `kbgen local` (the built-in example, end to end on this machine), then `kbgen preview` and `kbgen vendors`. Who runs which command (Kernelbot's backend, a vendor's node, the bootstrap step): README.md, \"The CLI at a glance\"."),
		kong.UsageOnError(),
		kong.ConfigureHelp(kong.HelpOptions{Compact: true}),
		kong.Writers(g.Stdout, g.Stderr),
		kong.Exit(func(c int) { panic(exitRequest(c)) }),
		kong.Bind(g),
		cliVars(),
	)
	if err != nil {
		fmt.Fprintf(g.Stderr, "kbgen: %v\n", err)
		return exitcode.Failure
	}
	defer func() {
		if r := recover(); r != nil {
			req, ok := r.(exitRequest)
			if !ok {
				panic(r)
			}
			code = int(req)
			if code != 0 {
				code = exitcode.Usage
			}
		}
	}()
	ctx, err := parser.Parse(args)
	if err != nil {
		if len(args) == 0 {
			// Bare `kbgen`: the whole usage teaches more than "expected one of".
			if trace, terr := kong.Trace(parser, args); terr == nil {
				parser.Stdout = g.Stderr
				_ = trace.PrintUsage(false)
				return exitcode.Usage
			}
		}
		fmt.Fprintf(g.Stderr, "kbgen: %v\n", err)
		return exitcode.Usage
	}
	if err := ctx.Run(g); err != nil {
		return report(g.Stderr, err)
	}
	return exitcode.OK
}

// report prints err as one line and returns its exit code: the one
// mapping from errors to codes (exitcode.Of), whichever command failed.
func report(stderr io.Writer, err error) int {
	if msg := exitcode.Message(err); msg != "" {
		fmt.Fprintf(stderr, "kbgen: %s\n", msg)
	}
	return exitcode.Of(err)
}
