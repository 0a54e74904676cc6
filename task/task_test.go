package task

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/gpu-mode/kbgen/payload"
)

func TestBuildPython(t *testing.T) {
	t.Parallel()
	c, err := Build("testdata/py", "testdata/submission.py", payload.ModeLeaderboard)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	// Key order inside each case is the task's; timeouts not set in the
	// task get Kernelbot's default of 180.
	want := `{"lang":"py","mode":"leaderboard","sources":{"eval.py":"print(\"eval\")\n","submission.py":"def custom_kernel(x):\n    return x\n","task.py":"def ref(x):\n    return x\n"},` +
		`"main":"eval.py","tests":[{"size":128,"seed":5236},{"size":4096,"seed":1,"name":"big"}],"benchmarks":[{"size":65536,"seed":42},{"size":1048576,"seed":7}],` +
		`"ranking_by":"geom","test_timeout":60,"benchmark_timeout":180,"ranked_timeout":180}`
	if string(got) != want {
		t.Errorf("config:\n got %s\nwant %s", got, want)
	}
	if _, err := payload.EncodeConfig(c); err != nil {
		t.Errorf("the built job does not encode: %v", err)
	}
}

func TestBuildCUDA(t *testing.T) {
	t.Parallel()
	c, err := Build("testdata/cu/task.yml", "testdata/submission.py", payload.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := json.Marshal(c)
	want := `{"lang":"cu","mode":"test","sources":{"eval.cu":"#include \"submission.cuh\"\nint main() {}\n"},` +
		`"headers":{"reference.cuh":"#pragma once\n","submission.cuh":"def custom_kernel(x):\n    return x\n"},` +
		`"tests":[{"size":8,"seed":1}],"benchmarks":[{"size":1024,"seed":2}],"seed":1234,"ranking_by":"last",` +
		`"test_timeout":180,"benchmark_timeout":180,"ranked_timeout":180,"defines":{"BLOCK":256,"NAME":"id"},"compile_flags":["-O3"]}`
	if string(got) != want {
		t.Errorf("config:\n got %s\nwant %s", got, want)
	}
}

func TestBuildCaseLineKeepsTaskOrder(t *testing.T) {
	t.Parallel()
	c, err := Build("testdata/py", "testdata/submission.py", payload.ModeTest)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := c.Tests[1].Line(), "size: 4096; seed: 1; name: big"; got != want {
		t.Errorf("case line = %q, want %q", got, want)
	}
}

func TestBuildErrors(t *testing.T) {
	t.Parallel()
	const okFiles = `files:
  - {"name": "submission.py", "source": "@SUBMISSION@"}
  - {"name": "eval.py", "source": "eval.py"}
`
	// kind is which failure; text is checked only where yaml gives the
	// failure no type, or where two rows of one key differ only in what
	// the message tells the task author.
	tests := []struct {
		name   string
		yml    string // written as task.yml with eval.py beside it; "" = no task.yml
		mode   payload.Mode
		kind   func(error) bool
		text   string
		jobErr bool // a *payload.Error (exit 65 in the CLI)
	}{
		{name: "missing task.yml", kind: is(fs.ErrNotExist)},
		{name: "empty", yml: "\n", kind: is(ErrEmpty)},
		{name: "not yaml", yml: "files: [\n", kind: notNil, text: "yaml: line"},
		{name: "wrong shape", yml: "files: 3\n", kind: as[*yaml.TypeError]},
		{name: "no lang", yml: okFiles + "config: {main: eval.py}\ntests: [{n: 1}]\n", kind: specField("lang"), text: "lang: missing"},
		{name: "unknown lang", yml: okFiles + "lang: rs\n", kind: specField("lang"), text: `unknown language "rs"`},
		{name: "no files", yml: "lang: py\n", kind: specField("files")},
		{name: "no submission", yml: "files:\n  - {name: eval.py, source: eval.py}\nlang: py\nconfig: {main: eval.py}\n", kind: specField("files"), text: "found 0"},
		{name: "two submissions", yml: okFiles + "  - {name: b.py, source: \"@SUBMISSION@\"}\nlang: py\nconfig: {main: eval.py}\n", kind: specField("files"), text: "found 2"},
		{name: "unknown placeholder", yml: "files:\n  - {name: eval.cu, source: \"@EVAL_CU@\"}\nlang: cu\n", kind: specField("files[0]"), text: "unknown placeholder @EVAL_CU@"},
		{name: "source missing", yml: "files:\n  - {name: x.py, source: nothere.py}\nlang: py\n", kind: all(specField("files[0]"), is(fs.ErrNotExist))},
		{name: "name escapes", yml: "files:\n  - {name: ../x.py, source: eval.py}\nlang: py\n", kind: specField("files[0]"), text: "escapes the work dir"},
		{name: "name twice", yml: okFiles + "  - {name: eval.py, source: eval.py}\nlang: py\n", kind: specField("files[2]")},
		{name: "py without main", yml: okFiles + "lang: py\ntests: [{n: 1}]\n", kind: specField("config.main")},
		{name: "cu without sources", yml: okFiles + "lang: cu\n", kind: specField("config.sources"), text: "a cu task names"},
		{name: "cu source not a file", yml: okFiles + "lang: cu\nconfig: {sources: [main.cu]}\n", kind: specField("config.sources"), text: `"main.cu" is not one of the files`},
		{name: "case not a mapping", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [3]\n", kind: specField("tests[0]"), text: "line 6: a case is a mapping"},
		{name: "case holds a list", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [{n: [1]}]\n", kind: specField("tests[0]"), text: "line 6:"},
		{name: "multi gpu without world size", yml: okFiles + "lang: py\nconfig: {main: eval.py}\nmulti_gpu: true\ntests: [{n: 1}]\n", kind: specField("tests[0]")},
		{name: "mode needs benchmarks", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [{n: 1}]\n", mode: payload.ModeBenchmark, kind: jobField(payload.KindMissingField, "benchmarks"), jobErr: true},
		{name: "bad mode", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [{n: 1}]\n", mode: "fast", kind: jobField(payload.KindInvalidField, "mode"), jobErr: true},
		{name: "bad ranking", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [{n: 1}]\nranking_by: best\n", kind: jobField(payload.KindInvalidField, "ranking_by"), jobErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			writeFile(t, filepath.Join(dir, "eval.py"), "print(1)\n")
			writeFile(t, filepath.Join(dir, "sub.py"), "x = 1\n")
			if tt.yml != "" {
				writeFile(t, filepath.Join(dir, "task.yml"), tt.yml)
			}
			mode := tt.mode
			if mode == "" {
				mode = payload.ModeTest
			}
			_, err := Build(dir, filepath.Join(dir, "sub.py"), mode)
			if err == nil {
				t.Fatal("no error, want one")
			}
			if !tt.kind(err) {
				t.Errorf("error = %q (%T): not the failure wanted", err, err)
			}
			if !strings.Contains(err.Error(), tt.text) {
				t.Errorf("error = %q, want it to contain %q", err, tt.text)
			}
			// One line is the contract: the CLI prints it as it is.
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			if got := payload.IsJobError(err); got != tt.jobErr {
				t.Errorf("IsJobError = %v, want %v", got, tt.jobErr)
			}
		})
	}
}

func notNil(err error) bool { return err != nil }

func is(target error) func(error) bool {
	return func(err error) bool { return errors.Is(err, target) }
}

func as[T error](err error) bool { return errors.As(err, new(T)) }

func all(checks ...func(error) bool) func(error) bool {
	return func(err error) bool {
		for _, c := range checks {
			if !c(err) {
				return false
			}
		}
		return true
	}
}

// specField is a *SpecError at field.
func specField(field string) func(error) bool {
	return func(err error) bool {
		var se *SpecError
		return errors.As(err, &se) && se.Field == field
	}
}

// jobField is a *payload.Error of kind at field.
func jobField(kind payload.ErrorKind, field string) func(error) bool {
	return func(err error) bool {
		var je *payload.Error
		return errors.As(err, &je) && je.Kind == kind && je.Field == field
	}
}

func TestBuildMissingSubmission(t *testing.T) {
	t.Parallel()
	_, err := Build("testdata/py", "testdata/nope.py", payload.ModeTest)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("error = %v, want a reading submission error", err)
	}
}

func TestLoadTestdataErrors(t *testing.T) {
	t.Parallel()
	for dir, field := range map[string]string{
		"testdata/bad_placeholder": "files[0]",
		"testdata/multigpu":        "benchmarks[0]",
	} {
		if _, err := Load(dir); !specField(field)(err) {
			t.Errorf("Load(%s) = %v, want a SpecError at %s", dir, err, field)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
