package main

import (
	"cmp"
	"context"
	"encoding/json"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/serve"
)

// HealthCmd is the health probe of a kbgen serve: its container image
// holds kbgen and CA certificates only, no curl.
type HealthCmd struct {
	URL     string        `arg:"" optional:"" placeholder:"URL" help:"The service: http://127.0.0.1:PORT, https://HOST (a TLS proxy in front) or unix:/path/to/socket. Default: $KBGEN_SERVER."`
	Timeout time.Duration `default:"5s" help:"How long to wait for its answer."`
}

func (c *HealthCmd) Run(g *Globals) error {
	url := cmp.Or(c.URL, g.Getenv(contract.EnvServer))
	if url == "" {
		return exitcode.Usagef("which kbgen serve? Give its URL, or set %s", contract.EnvServer)
	}
	rem, err := serve.NewRemote(url, "")
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	ctx, done := context.WithTimeout(context.Background(), c.Timeout)
	defer done()
	h, err := rem.Health(ctx)
	if h != nil {
		_ = json.NewEncoder(g.Stdout).Encode(h)
	}
	return exitcode.With(exitcode.Infra, err)
}

// Help is the detailed help under the flags list.
func (c *HealthCmd) Help() string {
	return `GET / of a kbgen serve (no token needed): prints its health as JSON and exits
0 when it is ok, 4 when it answers not ok (Buildkite unreachable since its
start, another service of its --name) or does not answer. The serve image's
HEALTHCHECK runs it (deployment/serve/Dockerfile, with $KBGEN_SERVER).

Example:
  kbgen health http://127.0.0.1:8077`
}
