// Package examples holds kbgen's built-in example tasks, embedded in the
// binary. Each is a Kernelbot task directory (task.yml naming its files,
// `../` sources shared with the other examples, @SUBMISSION@ for the
// submission), the format of gpu-mode/kernelbot's examples/, so
// `kbgen local --task examples/vectoradd` reads the very files `kbgen local
// --example vectoradd` embeds. They are plain Python 3 (no third-party
// packages) written to Kernelbot's evaluation protocol, with a correct
// submission, failing ones, and the cheats a leaderboard sees.
package examples

import (
	"embed"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"strings"

	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/task"
)

// files holds every example directory and the harness they share (eval.py,
// worker.py, utils.py at the top, as in Kernelbot's examples/).
//
//go:embed *.py */task.yml */*.py
var files embed.FS

// Default is the example `kbgen local` runs with no flags.
const Default = "vectoradd"

// DefaultSubmission names the correct submission of every example.
const DefaultSubmission = "submission"

// privateSeed is the secret seed a private-mode example job carries (the
// task.yml files leave seed unset so the other modes see the listed cases).
const privateSeed = int64(1234567)

// Example is one built-in task.
type Example struct {
	Name        string
	Description string
	// Submissions are the names --submission accepts: "submission" (the
	// correct one) first, then the other .py files of the directory that
	// task.yml does not name.
	Submissions []string
}

// List returns the examples by name.
func List() []Example {
	var out []Example
	for _, name := range Names() {
		t, err := task.LoadFS(files, name)
		if err != nil {
			continue
		}
		out = append(out, Example{Name: name, Description: t.Description, Submissions: submissions(t)})
	}
	return out
}

// Names lists the example names: the directories holding a task.yml.
func Names() []string {
	ymls, _ := fs.Glob(files, "*/"+task.FileName)
	names := make([]string, 0, len(ymls))
	for _, y := range ymls {
		names = append(names, path.Dir(y))
	}
	slices.Sort(names)
	return names
}

// submissions are the .py files of the task's directory that task.yml does
// not name, by name without .py; the correct one first.
func submissions(t *task.Task) []string {
	named := map[string]bool{}
	for _, f := range t.Files {
		named[f.Name] = true
	}
	pys, _ := fs.Glob(files, t.Name()+"/*.py")
	subs := []string{DefaultSubmission}
	for _, p := range pys {
		base := path.Base(p)
		if !named[base] && base != DefaultSubmission+".py" {
			subs = append(subs, strings.TrimSuffix(base, ".py"))
		}
	}
	slices.Sort(subs[1:])
	return subs
}

// ErrUnknownExample and ErrNoSubmission: a name that is not one of
// Names, or not one of an example's submissions.
var (
	ErrUnknownExample = errors.New("unknown example")
	ErrNoSubmission   = errors.New("no submission")
)

func load(name string) (*task.Task, error) {
	if !slices.Contains(Names(), name) {
		return nil, fmt.Errorf("%w %q (have: %s)", ErrUnknownExample, name, strings.Join(Names(), ", "))
	}
	t, err := task.LoadFS(files, name)
	if err != nil {
		return nil, fmt.Errorf("example %s: %w", name, err)
	}
	return t, nil
}

// Submission returns the source of a named submission of an example.
func Submission(example, name string) (string, error) {
	t, err := load(example)
	if err != nil {
		return "", err
	}
	if name == "" {
		name = DefaultSubmission
	}
	subs := submissions(t)
	if !slices.Contains(subs, name) {
		return "", fmt.Errorf("example %s has %w %q (have: %s)", example, ErrNoSubmission, name, strings.Join(subs, ", "))
	}
	b, err := files.ReadFile(path.Join(example, name+".py"))
	if err != nil {
		return "", fmt.Errorf("example %s: %w", example, err)
	}
	return string(b), nil
}

// Config builds the Kernelbot job for an example, mode and submission
// source, as `kbgen local --task` builds it from the directory on disk; a
// private-mode job also carries a secret seed.
func Config(example string, mode payload.Mode, submission string) (*payload.Config, error) {
	t, err := load(example)
	if err != nil {
		return nil, err
	}
	if mode == payload.ModePrivate && t.Seed == nil {
		seed := privateSeed
		t.Seed = &seed
	}
	cfg, err := t.Config(submission, mode)
	if err != nil {
		return nil, fmt.Errorf("example %s: %w", example, err)
	}
	return cfg, nil
}

// WriteList writes each example, its description and its submissions
// (kbgen local --list).
func WriteList(w io.Writer) error {
	for _, e := range List() {
		if _, err := fmt.Fprintf(w, "%-10s %s\n           submissions: %s\n", e.Name, e.Description, strings.Join(e.Submissions, ", ")); err != nil {
			return err
		}
	}
	return nil
}
