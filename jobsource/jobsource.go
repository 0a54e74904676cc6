// Package jobsource is the one place that decides where a job comes from:
// a built-in example, a payload file (or stdin), or a Kernelbot task
// directory plus a submission file. `kbgen local`, `submit`, `preview` and
// `encode` all take the same flags and call Load, so the same flags mean
// the same job everywhere.
package jobsource

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/task"
)

// Source names a job. At most one of Example, PayloadFile and Task is set.
type Source struct {
	// Example is a built-in example (examples.Names).
	Example string
	// Submission: with Example, a named submission of it or a file (any
	// name holding "/" or "."); with Task, the file that replaces
	// @SUBMISSION@.
	Submission string
	// PayloadFile holds an encoded payload or a plain JSON config; "-"
	// reads Options.Stdin.
	PayloadFile string
	// Task is a Kernelbot task directory, or its task.yml.
	Task string
	// Mode overrides a payload's own mode, and is the mode of an example or
	// task job; "" keeps the payload's, or takes Options.DefaultMode.
	Mode payload.Mode
}

// Options are what differs between the commands that load jobs.
type Options struct {
	Stdin io.Reader
	// DefaultExample: when no source is named, the built-in example
	// (examples.Default) is the job; otherwise that is a usage error.
	DefaultExample bool
	// DefaultMode is the mode of an example or task job given no Mode.
	DefaultMode payload.Mode
}

// UsageError is a mistake in how the job was named (conflicting or missing
// flags, an unreadable file): the caller's usage, not the job, is wrong.
type UsageError struct{ Err error }

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// ExitCode makes a usage error exit 2 (exitcode.Coder).
func (e *UsageError) ExitCode() int { return exitcode.Usage }

func usagef(format string, args ...any) error {
	return &UsageError{Err: fmt.Errorf(format, args...)}
}

// Load returns the job src names, validated and encoded. Errors are a
// *UsageError or a payload job error (payload.IsJobError).
func Load(src Source, opts Options) (*payload.Input, error) {
	if err := src.check(opts); err != nil {
		return nil, err
	}
	in, err := src.load(opts)
	if err != nil {
		return nil, err
	}
	if len(in.Encoded) > payload.MaxEncodedBytes {
		return nil, &payload.Error{Kind: payload.KindTooLarge, Msg: fmt.Sprintf("encoded payload is %d bytes; the limit is %d", len(in.Encoded), payload.MaxEncodedBytes)}
	}
	return in, nil
}

func (s Source) check(opts Options) error {
	named := 0
	for _, v := range []string{s.Example, s.PayloadFile, s.Task} {
		if v != "" {
			named++
		}
	}
	switch {
	case named > 1:
		return usagef("give one of --example, --payload-file or --task")
	case named == 0 && !opts.DefaultExample:
		return usagef("no job: pass --payload-file FILE, --task DIR --submission FILE, or --example NAME")
	case s.Mode != "" && !s.Mode.Valid():
		_, err := payload.ParseMode(string(s.Mode))
		return usagef("--mode: %w", err)
	case s.PayloadFile != "" && s.Submission != "":
		return usagef("--submission goes with --example or --task, not --payload-file")
	case s.Task != "" && s.Submission == "":
		return usagef("--task needs --submission FILE")
	}
	return nil
}

func (s Source) load(opts Options) (*payload.Input, error) {
	mode := s.Mode
	if mode == "" {
		mode = opts.DefaultMode
	}
	switch {
	case s.PayloadFile != "":
		return s.payloadFile(opts.Stdin)
	case s.Task != "":
		cfg, err := task.Build(s.Task, s.Submission, mode)
		if err != nil && !payload.IsJobError(err) {
			return nil, &UsageError{Err: err}
		}
		if err != nil {
			return nil, err
		}
		return encode(cfg)
	}
	name := s.Example
	if name == "" {
		name = examples.Default
	}
	sub, err := exampleSubmission(name, s.Submission)
	if err != nil {
		return nil, &UsageError{Err: err}
	}
	cfg, err := examples.Config(name, mode, sub)
	if err != nil {
		return nil, err
	}
	return encode(cfg)
}

func (s Source) payloadFile(stdin io.Reader) (*payload.Input, error) {
	data, err := ReadFile(s.PayloadFile, stdin)
	if err != nil {
		return nil, err
	}
	in, err := payload.ParseInput(data)
	if err != nil || s.Mode == "" || s.Mode == in.Config.Mode {
		return in, err
	}
	cfg := *in.Config
	cfg.Mode = s.Mode
	return encode(&cfg)
}

// exampleSubmission is a named submission of the example, or a file.
func exampleSubmission(example, sub string) (string, error) {
	if !strings.ContainsAny(sub, "/.") {
		return examples.Submission(example, sub)
	}
	b, err := os.ReadFile(sub)
	if err != nil {
		return "", fmt.Errorf("reading submission: %w", err)
	}
	return string(b), nil
}

func encode(cfg *payload.Config) (*payload.Input, error) {
	enc, err := payload.EncodeConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &payload.Input{Config: cfg, Encoded: enc}, nil
}

// maxInputBytes bounds what is read from a job file or stdin: a little more
// than the largest job, so an oversized one is reported as such.
const maxInputBytes = payload.MaxInflatedBytes + 1

// ReadFile reads a job file, or r for "-", with a size bound. An
// unreadable file is a *UsageError.
func ReadFile(name string, r io.Reader) ([]byte, error) {
	if name != "-" {
		f, err := os.Open(name)
		if err != nil {
			return nil, &UsageError{Err: fmt.Errorf("reading job: %w", err)}
		}
		defer f.Close()
		r = f
	}
	if r == nil {
		return nil, usagef("reading job: no standard input")
	}
	data, err := io.ReadAll(io.LimitReader(r, maxInputBytes))
	if err != nil {
		return nil, fmt.Errorf("reading job: %w", err)
	}
	return data, nil
}
