package noise

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// toolTimeout bounds one nvidia-smi or rocm-smi call; a hung driver
// makes the source unavailable rather than holding up the job.
const toolTimeout = 10 * time.Second

// errNotFound is a GPU tool missing from PATH.
var errNotFound = errors.New("not found on PATH")

// lookPath finds file on the PATH of env (the runner's, not this
// process's, so tests can put stand-ins first).
func lookPath(file string, env []string) (string, error) {
	path := ""
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			path = v
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, file)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errNotFound
}

// runTool runs a GPU tool and returns its stdout; on failure the error
// carries the first line it printed.
func runTool(ctx context.Context, env []string, name string, args ...string) ([]byte, error) {
	p, err := lookPath(name, env)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, toolTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, p, args...)
	cmd.Env = env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		msg := firstLine(errb.String())
		if msg == "" {
			msg = firstLine(out.String())
		}
		if msg == "" {
			return nil, err
		}
		return out.Bytes(), errors.New(msg)
	}
	return out.Bytes(), nil
}

func firstLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	return strings.TrimSpace(s)
}
