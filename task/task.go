// Package task turns a Kernelbot task directory (task.yml and the files it
// names) plus one submission file into a payload.Config, the way Kernelbot's
// make_task_definition + build_task_config do, so a person can submit
// without writing JSON.
package task

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpu-mode/kbgen/payload"
)

// SubmissionPlaceholder is the `source` of the file that receives the
// submission's content.
const SubmissionPlaceholder = "@SUBMISSION@"

// FileName is the task definition inside a task directory.
const FileName = "task.yml"

// Task is a loaded task.yml with every file read: what Kernelbot calls a
// LeaderboardTask. Fields the evaluation does not need (templates,
// milestones, gpus) are not kept.
type Task struct {
	// Description is task.yml's description, for listings.
	Description string
	Lang        payload.Lang
	// Files are the work dir's files in task.yml order; the submission's
	// entry holds SubmissionPlaceholder.
	Files      []File
	Main       string   // py: the script run
	Sources    []string // cu: the files compiled; every other file is a header
	Defines    map[string]payload.Scalar
	Includes   []string
	Flags      []string
	Tests      []payload.Case
	Benchmarks []payload.Case

	TestTimeout      int
	BenchmarkTimeout int
	RankedTimeout    int
	RankingBy        payload.RankingBy
	Seed             *int64
	MultiGPU         bool

	name string
}

// Name is the directory's base name: what `kbgen local --example` calls a
// built-in task.
func (t *Task) Name() string { return t.name }

// File is one entry of task.yml's `files`.
type File struct {
	Name    string
	Content string
}

// IsSubmission reports whether the file is the one the submission fills.
func (f File) IsSubmission() bool { return f.Content == SubmissionPlaceholder }

// spec is task.yml as written. Test cases stay yaml.Nodes so their key
// order survives: Kernelbot writes each case line in the task's order.
type spec struct {
	Files []struct {
		Name   string `yaml:"name"`
		Source string `yaml:"source"`
	} `yaml:"files"`
	Lang        string `yaml:"lang"`
	Description string `yaml:"description"`
	Config      struct {
		Main         string               `yaml:"main"`
		Sources      []string             `yaml:"sources"`
		IncludeDirs  []string             `yaml:"include_dirs"`
		Defines      map[string]yaml.Node `yaml:"defines"`
		CompileFlags []string             `yaml:"compile_flags"`
	} `yaml:"config"`
	Tests            []yaml.Node `yaml:"tests"`
	Benchmarks       []yaml.Node `yaml:"benchmarks"`
	TestTimeout      *int        `yaml:"test_timeout"`
	BenchmarkTimeout *int        `yaml:"benchmark_timeout"`
	RankedTimeout    *int        `yaml:"ranked_timeout"`
	RankingBy        string      `yaml:"ranking_by"`
	Seed             *int64      `yaml:"seed"`
	MultiGPU         bool        `yaml:"multi_gpu"`
}

// Build loads the task in dir (a directory holding task.yml, or the path of
// the yml itself), puts the content of submissionPath in place of
// @SUBMISSION@ and returns the validated job for mode.
func Build(dir, submissionPath string, mode payload.Mode) (*payload.Config, error) {
	t, err := Load(dir)
	if err != nil {
		return nil, err
	}
	sub, err := os.ReadFile(submissionPath)
	if err != nil {
		return nil, fmt.Errorf("reading submission: %w", err)
	}
	return t.Config(string(sub), mode)
}

// Load reads and checks a task definition and every file it names.
// Sources are read relative to the task directory and may reach a sibling
// (Kernelbot's examples share ../eval.py) or be absolute: the task author
// is trusted, the names in the job are what must stay inside.
func Load(dir string) (*Task, error) {
	ymlPath := dir
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		ymlPath = filepath.Join(dir, FileName)
	}
	root := filepath.Dir(ymlPath)
	return load(ymlPath, filepath.Base(root), func(src string) ([]byte, error) {
		if !filepath.IsAbs(src) {
			src = filepath.Join(root, src)
		}
		return os.ReadFile(src)
	})
}

// LoadFS reads the task in directory dir of fsys (the embedded examples).
// A `../` source may reach a sibling of dir but never leave fsys.
func LoadFS(fsys fs.FS, dir string) (*Task, error) {
	return load(path.Join(dir, FileName), path.Base(dir), func(src string) ([]byte, error) {
		p := path.Join(dir, src)
		if path.IsAbs(src) || !fs.ValidPath(p) {
			return nil, fmt.Errorf("source %s leaves the embedded examples", src)
		}
		return fs.ReadFile(fsys, p)
	})
}

// readFunc reads one file of a task by the source path task.yml gives.
type readFunc func(src string) ([]byte, error)

func load(ymlPath, name string, read readFunc) (*Task, error) {
	raw, err := read(path.Base(filepath.ToSlash(ymlPath)))
	if err != nil {
		return nil, fmt.Errorf("reading task: %w", err)
	}
	var s spec
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&s); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("task %s: %w", ymlPath, ErrEmpty)
		}
		return nil, fmt.Errorf("task %s: %w", ymlPath, oneLine(err))
	}
	t, err := s.resolve(read)
	if err != nil {
		return nil, fmt.Errorf("task %s: %w", ymlPath, err)
	}
	t.name = name
	return t, nil
}

func (s *spec) resolve(read readFunc) (*Task, error) {
	t := &Task{
		Description:      strings.TrimSpace(s.Description),
		Lang:             payload.Lang(s.Lang),
		Main:             s.Config.Main,
		Sources:          s.Config.Sources,
		Includes:         s.Config.IncludeDirs,
		Flags:            s.Config.CompileFlags,
		TestTimeout:      intOr(s.TestTimeout, int(payload.DefaultTimeout.Seconds())),
		BenchmarkTimeout: intOr(s.BenchmarkTimeout, int(payload.DefaultTimeout.Seconds())),
		RankedTimeout:    intOr(s.RankedTimeout, int(payload.DefaultTimeout.Seconds())),
		RankingBy:        payload.RankingBy(s.RankingBy),
		Seed:             s.Seed,
		MultiGPU:         s.MultiGPU,
	}
	switch t.Lang {
	case payload.LangPython, payload.LangCUDA:
	case "":
		return nil, specErr("lang", `lang: missing (want "py" or "cu")`)
	default:
		return nil, specErr("lang", `lang: unknown language %q (want "py" or "cu")`, s.Lang)
	}
	if t.RankingBy == "" {
		t.RankingBy = payload.RankingLast
	}
	if len(s.Files) == 0 {
		return nil, specErr("files", "files: the task names no files")
	}
	seen := map[string]bool{}
	subs := 0
	for i, f := range s.Files {
		if f.Name == "" || f.Source == "" {
			return nil, specErr(fmt.Sprintf("files[%d]", i), "files[%d]: needs both name and source", i)
		}
		if err := payload.CheckFileName(f.Name); err != nil {
			return nil, specErr(fmt.Sprintf("files[%d]", i), "files[%d]: %w", i, err)
		}
		if seen[f.Name] {
			return nil, specErr(fmt.Sprintf("files[%d]", i), "files[%d]: %q is named twice", i, f.Name)
		}
		seen[f.Name] = true
		if f.Source == SubmissionPlaceholder {
			subs++
			t.Files = append(t.Files, File{Name: f.Name, Content: SubmissionPlaceholder})
			continue
		}
		if strings.HasPrefix(f.Source, "@") && strings.HasSuffix(f.Source, "@") {
			return nil, specErr(fmt.Sprintf("files[%d]", i), "files[%d]: unknown placeholder %s (only %s is filled in)", i, f.Source, SubmissionPlaceholder)
		}
		b, err := read(f.Source)
		if err != nil {
			return nil, specErr(fmt.Sprintf("files[%d]", i), "files[%d] (%s): %w", i, f.Name, err)
		}
		t.Files = append(t.Files, File{Name: f.Name, Content: string(b)})
	}
	if subs != 1 {
		return nil, specErr("files", "files: want exactly one file with source %s, found %d", SubmissionPlaceholder, subs)
	}
	if t.Lang == payload.LangCUDA {
		if len(t.Sources) == 0 {
			return nil, specErr("config.sources", "config.sources: a cu task names the files to compile")
		}
		for _, src := range t.Sources {
			if !seen[src] {
				return nil, specErr("config.sources", "config.sources: %q is not one of the files", src)
			}
		}
		if len(s.Config.Defines) > 0 {
			t.Defines = map[string]payload.Scalar{}
			for k, n := range s.Config.Defines {
				var v payload.Scalar
				if err := jsonFromNode(&n, &v); err != nil {
					return nil, specErr("config.defines."+k, "config.defines.%s: %w", k, err)
				}
				t.Defines[k] = v
			}
		}
	} else if t.Main == "" {
		return nil, specErr("config.main", "config.main: a py task names the script to run (e.g. eval.py)")
	}
	var err error
	if t.Tests, err = cases("tests", s.Tests); err != nil {
		return nil, err
	}
	if t.Benchmarks, err = cases("benchmarks", s.Benchmarks); err != nil {
		return nil, err
	}
	if t.MultiGPU {
		for _, group := range []struct {
			name  string
			cases []payload.Case
		}{{"tests", t.Tests}, {"benchmarks", t.Benchmarks}} {
			for i, c := range group.cases {
				if _, ok := c.Get("world_size"); !ok {
					return nil, specErr(fmt.Sprintf("%s[%d]", group.name, i), "%s[%d]: a multi_gpu task gives every case a world_size", group.name, i)
				}
			}
		}
	}
	return t, nil
}

// Config fills the submission in and returns the validated job for mode,
// as Kernelbot's build_task_config does: py gets every file as a source,
// cu splits config.sources from headers. arch stays null (the generator or
// the runner picks it for the GPU).
func (t *Task) Config(submission string, mode payload.Mode) (*payload.Config, error) {
	files := make(map[string]string, len(t.Files))
	for _, f := range t.Files {
		if f.IsSubmission() {
			files[f.Name] = submission
		} else {
			files[f.Name] = f.Content
		}
	}
	c := &payload.Config{
		Lang:             t.Lang,
		Mode:             mode,
		Tests:            t.Tests,
		Benchmarks:       t.Benchmarks,
		Seed:             t.Seed,
		RankingBy:        t.RankingBy,
		TestTimeout:      t.TestTimeout,
		BenchmarkTimeout: t.BenchmarkTimeout,
		RankedTimeout:    t.RankedTimeout,
		MultiGPU:         t.MultiGPU,
	}
	if t.Lang == payload.LangPython {
		c.Main = t.Main
		c.Sources = files
	} else {
		c.Sources, c.Headers = map[string]string{}, map[string]string{}
		compiled := map[string]bool{}
		for _, s := range t.Sources {
			compiled[s] = true
		}
		for name, content := range files {
			if compiled[name] {
				c.Sources[name] = content
			} else {
				c.Headers[name] = content
			}
		}
		c.Defines = t.Defines
		c.IncludeDirs = t.Includes
		c.CompileFlags = t.Flags
	}
	if err := c.Validate(); err != nil {
		return nil, err
	}
	return c, nil
}

func cases(field string, nodes []yaml.Node) ([]payload.Case, error) {
	out := make([]payload.Case, 0, len(nodes))
	for i := range nodes {
		if nodes[i].Kind != yaml.MappingNode {
			return nil, specErr(fmt.Sprintf("%s[%d]", field, i), "%s[%d]: line %d: a case is a mapping of name to value", field, i, nodes[i].Line)
		}
		var c payload.Case
		if err := jsonFromNode(&nodes[i], &c); err != nil {
			return nil, specErr(fmt.Sprintf("%s[%d]", field, i), "%s[%d]: line %d: %w", field, i, nodes[i].Line, err)
		}
		out = append(out, c)
	}
	return out, nil
}

func intOr(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// oneLine keeps yaml's multi-error messages to the single line the CLI
// prints; the error stays yaml's (a *yaml.TypeError for a wrong shape).
func oneLine(err error) error {
	return &oneLineError{msg: strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", "; ")), " "), err: err}
}

type oneLineError struct {
	msg string
	err error
}

func (e *oneLineError) Error() string { return e.msg }
func (e *oneLineError) Unwrap() error { return e.err }

// ErrEmpty is a task.yml with nothing in it.
var ErrEmpty = errors.New("the file is empty")

// SpecError is a task.yml the loader refuses at one key. Its message is
// the task author's (the key, what is wrong, what is wanted); Field says
// which key to a caller.
type SpecError struct {
	// Field is the key as task.yml spells it: "lang", "files[1]",
	// "config.sources", "tests[0]".
	Field string
	Err   error
}

func (e *SpecError) Error() string { return e.Err.Error() }
func (e *SpecError) Unwrap() error { return e.Err }

func specErr(field, format string, args ...any) error {
	return &SpecError{Field: field, Err: fmt.Errorf(format, args...)}
}
