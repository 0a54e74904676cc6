package client

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// Settings name the Buildkite a command talks to, as its flags give them;
// each empty one falls back to the environment (Options). The token is
// never a flag (a flag's value shows in `ps`): it comes from
// BUILDKITE_API_TOKEN or TokenFile.
type Settings struct {
	Org, Pipeline, APIURL string
	// TokenFile holds one token a line (blank lines and #-comments
	// skipped), each of a different Buildkite user: kbgen serve spreads
	// its requests over their per-user limits; other commands use the
	// first.
	TokenFile string
	// Debug, when set, gets a line per request (Options.Debug).
	Debug io.Writer
	// NeedPipeline: the command creates or reads builds.
	NeedPipeline bool
}

// Options resolves s against the environment (getenv) into client
// options. What is missing or unreadable carries exitcode.Usage.
func (s Settings) Options(getenv func(string) string) (Options, error) {
	tokens := strings.Fields(getenv(contract.EnvAPIToken))
	if s.TokenFile != "" {
		b, err := os.ReadFile(s.TokenFile)
		if err != nil {
			return Options{}, exitcode.With(exitcode.Usage, fmt.Errorf("reading --token-file: %w", err))
		}
		tokens = tokenLines(string(b))
	}
	if len(tokens) == 0 {
		return Options{}, exitcode.With(exitcode.Usage, errors.New("no Buildkite API token: set BUILDKITE_API_TOKEN or pass --token-file"))
	}
	opts := Options{
		APIURL:     cmp.Or(s.APIURL, getenv(contract.EnvAPIURL)),
		Org:        cmp.Or(s.Org, getenv(contract.EnvOrg)),
		Pipeline:   cmp.Or(s.Pipeline, getenv(contract.EnvPipeline)),
		Token:      tokens[0],
		MoreTokens: tokens[1:],
		Debug:      s.Debug,
	}
	if opts.Org == "" {
		return Options{}, exitcode.With(exitcode.Usage, errors.New("no Buildkite organization: pass --org or set BUILDKITE_ORG"))
	}
	if s.NeedPipeline && opts.Pipeline == "" {
		return Options{}, exitcode.With(exitcode.Usage, errors.New("no Buildkite pipeline: pass --pipeline or set BUILDKITE_PIPELINE"))
	}
	return opts, nil
}

// tokenLines reads a token file: one token a line, blank lines and
// #-comments skipped.
func tokenLines(s string) []string {
	var out []string
	for line := range strings.Lines(s) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return out
}
