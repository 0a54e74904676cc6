package hostfacts

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/imageref"
)

// ImageTimeout bounds the docker question: the facts wait for it, the
// result does not.
const ImageTimeout = 5 * time.Second

// ImagePulled asks the node's docker (docker: the CLI, "" for "docker"
// on PATH) whether it has image ref, as the sandbox's `docker run` will
// find it: `docker image inspect --format '{{.Id}}' REF` prints the id
// and exits 0 when present, and exits 1 with "No such image: REF" when
// not (docker/cli cli/command/image/inspect.go, via the engine's
// errdefs.NotFound). Anything else (no docker, a daemon that is down or
// slow, no ref, or a ref outside the image grammar, which could read as a
// flag) is not known: nil, never "missing".
func ImagePulled(ctx context.Context, docker, ref string) *bool {
	if _, err := imageref.Parse(ref); err != nil {
		return nil
	}
	if docker == "" {
		docker = "docker"
	}
	ctx, cancel := context.WithTimeout(ctx, ImageTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, docker, "image", "inspect", "--format", "{{.Id}}", ref)
	cmd.WaitDelay = time.Second
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil && strings.HasPrefix(strings.TrimSpace(out.String()), "sha256:"):
		return ptr(true)
	case errors.As(err, &exit) && ctx.Err() == nil && strings.Contains(strings.ToLower(errOut.String()), "no such image"):
		return ptr(false)
	}
	return nil
}

func ptr(b bool) *bool { return &b }
