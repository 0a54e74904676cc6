// Package bkagent is kbgen's one wrapper around the buildkite-agent CLI
// inside a job: `pipeline upload` (the bootstrap step), `artifact upload`
// and `annotate` (the eval step's result). Everything kbgen hands the agent
// that could be large or hostile (the pipeline YAML, the annotation's
// markdown) goes through stdin, never argv; a failure carries the agent's
// own last lines, so the build log says why.
package bkagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Binary is the agent CLI's name on PATH.
const Binary = "buildkite-agent"

// callTimeout bounds each agent call: an upload that hangs must not hold
// the GPU until the step's own timeout.
const callTimeout = 5 * time.Minute

// Agent runs buildkite-agent subcommands for the current job.
type Agent struct {
	// Path is the buildkite-agent executable.
	Path string
	// Env is its whole environment (os.Environ form): it needs the job's
	// BUILDKITE_AGENT_ACCESS_TOKEN and endpoint.
	Env []string
}

// NotFoundError is an agent CLI that is not on PATH: kbgen is not running
// inside a Buildkite job.
type NotFoundError struct{ Name string }

func (e *NotFoundError) Error() string { return e.Name + " not found on PATH" }

// Find returns the agent CLI name (Binary when "") found on environ's PATH,
// or a *NotFoundError. A name with a slash is used as it is.
func Find(name string, environ []string) (*Agent, error) {
	if name == "" {
		name = Binary
	}
	path, err := lookPath(name, environ)
	if err != nil {
		return nil, &NotFoundError{Name: name}
	}
	return &Agent{Path: path, Env: environ}, nil
}

// PipelineUpload pipes a pipeline document into `buildkite-agent pipeline
// upload`.
func (a *Agent) PipelineUpload(ctx context.Context, doc []byte) error {
	return a.run(ctx, "", doc, "pipeline", "upload")
}

// Annotate posts markdown as the build's annotation under context, with
// style (success, info, warning, error).
func (a *Agent) Annotate(ctx context.Context, markdown, style, context string) error {
	return a.run(ctx, "", []byte(markdown), "annotate", "--style", style, "--context", context)
}

// MetaDataSet sets the build's meta-data key to value; the value goes
// through stdin, never argv (it can be large).
func (a *Agent) MetaDataSet(ctx context.Context, key string, value []byte) error {
	return a.run(ctx, "", value, "meta-data", "set", key)
}

// MetaDataExists reports whether the build's meta-data key is set.
func (a *Agent) MetaDataExists(ctx context.Context, key string) (bool, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.Path, "meta-data", "exists", key)
	cmd.Env = a.Env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ee) && ee.ExitCode() == metaDataAbsent:
		return false, nil
	}
	return false, fmt.Errorf("buildkite-agent meta-data exists failed: %v: %s", err, summary(out.String()))
}

// metaDataAbsent is `meta-data exists`'s exit status for a key not set
// (clicommand/meta_data_exists.go).
const metaDataAbsent = 100

func (a *Agent) run(ctx context.Context, dir string, stdin []byte, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, a.Path, args...)
	cmd.Dir = dir
	cmd.Env = a.Env
	cmd.Stdin = bytes.NewReader(stdin)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return ranErr("buildkite-agent "+args[0]+" "+args[1], cmd.Run(), out.String())
}

// CallError is an agent call that ran and exited non-zero: the agent
// answered no (a 403, a missing artifact), as opposed to a call that
// could not run at all. Output is the summary of what it printed.
type CallError struct {
	Call   string // "buildkite-agent artifact upload"
	Exit   int
	Output string
}

func (e *CallError) Error() string {
	return fmt.Sprintf("%s failed (exit %d): %s", e.Call, e.Exit, e.Output)
}

// ranErr is a finished agent call's error: nil, a *CallError with its
// exit status and the summary of its output, or why it could not run.
func ranErr(what string, err error, output string) error {
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) && ee.Exited() {
		return &CallError{Call: what, Exit: ee.ExitCode(), Output: summary(output)}
	}
	return fmt.Errorf("running %s: %w", what, err)
}

// summary is the agent's output on one line: all of it when short, else
// its first lines (what it was doing) and its last (how it ended), so a
// panic's stack trace does not hide what came before.
func summary(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	const head, tail = 2, 4
	if len(lines) > head+tail+1 {
		lines = append(append(lines[:head:head], "…"), lines[len(lines)-tail:]...)
	}
	return strings.Join(lines, " | ")
}

// lookPath finds file on environ's PATH (the job's, which may differ from
// this process's), falling back to this process's PATH when environ has
// none.
func lookPath(file string, environ []string) (string, error) {
	if strings.Contains(file, "/") {
		return exec.LookPath(file)
	}
	for _, kv := range environ {
		v, ok := strings.CutPrefix(kv, "PATH=")
		if !ok {
			continue
		}
		for _, d := range filepath.SplitList(v) {
			p := filepath.Join(d, file)
			if fi, err := os.Stat(p); d != "" && err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
				return p, nil
			}
		}
		return "", exec.ErrNotFound
	}
	return exec.LookPath(file)
}
