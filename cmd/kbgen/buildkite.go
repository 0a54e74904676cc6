package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// BuildkiteFlags are the flags of every command that talks to the
// Buildkite REST API. The token is read from the environment or a file,
// never from a flag: a flag's value shows in `ps`.
type BuildkiteFlags struct {
	Org       string `placeholder:"SLUG" help:"Buildkite organization slug (default: $BUILDKITE_ORG), e.g. gpu-mode."`
	Pipeline  string `placeholder:"SLUG" help:"Pipeline whose bootstrap step runs kbgen generate (default: $BUILDKITE_PIPELINE), e.g. kernelbot."`
	APIURL    string `name:"api-url" placeholder:"URL" help:"Buildkite REST API base URL (default: $BUILDKITE_API_URL, else https://api.buildkite.com/)."`
	TokenFile string `name:"token-file" placeholder:"FILE" help:"Read the API token from FILE instead of $BUILDKITE_API_TOKEN (needs ${api_scopes}: kbgen doctor --buildkite checks them). kbgen serve takes several, one a line, each of a different Buildkite user, and spreads its requests over their per-user limits; other commands use the first."`
	Debug     bool   `help:"Log every API request, retry and wait to stderr (the token is never logged)."`
}

// clientHook lets in-process tests put the client on a virtual clock.
var clientHook func(*client.Options)

// newClient builds the API client from flags and the environment.
func (f *BuildkiteFlags) newClient(g *Globals, needPipeline bool) (*client.Client, error) {
	return f.newClientWith(g, needPipeline, nil)
}

// newClientWith is newClient with a last say on the options (kbgen serve
// adds its budget and retry policy).
func (f *BuildkiteFlags) newClientWith(g *Globals, needPipeline bool, adjust func(*client.Options)) (*client.Client, error) {
	settings := client.Settings{Org: f.Org, Pipeline: f.Pipeline, APIURL: f.APIURL, TokenFile: f.TokenFile, NeedPipeline: needPipeline}
	if f.Debug {
		settings.Debug = g.Stderr
	}
	opts, err := settings.Options(g.Getenv)
	if err != nil {
		return nil, err
	}
	for _, edit := range []func(*client.Options){adjust, clientHook} {
		if edit != nil {
			edit(&opts)
		}
	}
	c, err := client.New(opts)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return c, nil
}

// WaitFlags control how a command waits for a build and reports progress.
type WaitFlags struct {
	Timeout  time.Duration `default:"15m" help:"Give up after this long (e.g. 90s, 20m), cancel the build and exit 5. 0 waits forever."`
	Progress string        `enum:"text,json" default:"text" help:"Progress on stderr: text (the build URL, then 'scheduled 0.3s → running 2.1s → passed 41.0s') or json (one event object per line)."`
	Quiet    bool          `short:"q" help:"No progress on stderr; errors only."`
}

func (w *WaitFlags) progress(g *Globals) *client.Progress {
	format := w.Progress
	if w.Quiet {
		format = client.ProgressQuiet
	}
	return client.NewProgress(g.Stderr, format)
}

func (w *WaitFlags) options(c *client.Client, p *client.Progress) client.WaitOptions {
	opts := client.WaitOptions{Start: c.Clock().Now(), OnEvent: p.Event}
	if w.Timeout > 0 {
		opts.Deadline = opts.Start.Add(w.Timeout)
	}
	return opts
}

// reportOutcome prints the outcome's FullResult on stdout (and nothing else
// there), ends the progress line, and exits with the status's code.
func reportOutcome(g *Globals, p *client.Progress, out *client.Outcome) error {
	code := out.Status.ExitCode()
	b, err := json.Marshal(out.Result)
	if err != nil {
		return exitcode.With(exitcode.Failure, fmt.Errorf("encoding result: %w", err))
	}
	fmt.Fprintf(g.Stdout, "%s\n", b)
	done := client.Event{Kind: "done", Success: &out.Result.Success, Exit: &code, Error: out.Result.Error,
		Seconds: out.Elapsed.Round(100 * time.Millisecond).Seconds()}
	if out.Build != nil {
		done.Build, done.State = out.Build.Number, out.Build.State
	}
	p.Event(done)
	if code == exitcode.OK {
		return nil
	}
	return exitcode.Silent(code)
}

// newRunID names a run that the caller did not name.
func newRunID() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return "kbgen-" + hex.EncodeToString(b)
}
