package task

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	tests := []struct {
		name    string
		yml     string // written as task.yml with eval.py beside it; "" = no task.yml
		mode    payload.Mode
		wantErr string
		jobErr  bool // a *payload.Error (exit 65 in the CLI)
	}{
		{name: "missing task.yml", wantErr: "reading task: open "},
		{name: "empty", yml: "\n", wantErr: "the file is empty"},
		{name: "not yaml", yml: "files: [\n", wantErr: "yaml: line"},
		{name: "wrong shape", yml: "files: 3\n", wantErr: "cannot unmarshal"},
		{name: "no lang", yml: okFiles + "config: {main: eval.py}\ntests: [{n: 1}]\n", wantErr: `lang: missing`},
		{name: "unknown lang", yml: okFiles + "lang: rs\n", wantErr: `unknown language "rs"`},
		{name: "no files", yml: "lang: py\n", wantErr: "names no files"},
		{name: "no submission", yml: "files:\n  - {name: eval.py, source: eval.py}\nlang: py\nconfig: {main: eval.py}\n", wantErr: "exactly one file with source @SUBMISSION@, found 0"},
		{name: "two submissions", yml: okFiles + "  - {name: b.py, source: \"@SUBMISSION@\"}\nlang: py\nconfig: {main: eval.py}\n", wantErr: "found 2"},
		{name: "unknown placeholder", yml: "files:\n  - {name: eval.cu, source: \"@EVAL_CU@\"}\nlang: cu\n", wantErr: "unknown placeholder @EVAL_CU@"},
		{name: "source missing", yml: "files:\n  - {name: x.py, source: nothere.py}\nlang: py\n", wantErr: "files[0] (x.py): open "},
		{name: "name escapes", yml: "files:\n  - {name: ../x.py, source: eval.py}\nlang: py\n", wantErr: "escapes the work dir"},
		{name: "name twice", yml: okFiles + "  - {name: eval.py, source: eval.py}\nlang: py\n", wantErr: `"eval.py" is named twice`},
		{name: "py without main", yml: okFiles + "lang: py\ntests: [{n: 1}]\n", wantErr: "config.main"},
		{name: "cu without sources", yml: okFiles + "lang: cu\n", wantErr: "config.sources: a cu task"},
		{name: "cu source not a file", yml: okFiles + "lang: cu\nconfig: {sources: [main.cu]}\n", wantErr: `"main.cu" is not one of the files`},
		{name: "case not a mapping", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [3]\n", wantErr: "tests[0]: line 6: a case is a mapping"},
		{name: "case holds a list", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [{n: [1]}]\n", wantErr: "tests[0]: line 6:"},
		{name: "multi gpu without world size", yml: okFiles + "lang: py\nconfig: {main: eval.py}\nmulti_gpu: true\ntests: [{n: 1}]\n", wantErr: "tests[0]: a multi_gpu task gives every case a world_size"},
		{name: "mode needs benchmarks", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [{n: 1}]\n", mode: payload.ModeBenchmark, wantErr: `invalid job: benchmarks: mode "benchmark" needs at least one case`, jobErr: true},
		{name: "bad mode", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [{n: 1}]\n", mode: "fast", wantErr: `unknown mode "fast"`, jobErr: true},
		{name: "bad ranking", yml: okFiles + "lang: py\nconfig: {main: eval.py}\ntests: [{n: 1}]\nranking_by: best\n", wantErr: `ranking_by: unknown value "best"`, jobErr: true},
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
				t.Fatalf("no error, want one containing %q", tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("error = %q, want it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
			if got := payload.IsJobError(err); got != tt.jobErr {
				t.Errorf("IsJobError = %v, want %v", got, tt.jobErr)
			}
		})
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
	for dir, want := range map[string]string{
		"testdata/bad_placeholder": "files[0]: unknown placeholder @EVAL_CU@",
		"testdata/multigpu":        "benchmarks[0]: a multi_gpu task gives every case a world_size",
	} {
		if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load(%s) = %v, want an error containing %q", dir, err, want)
		}
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
