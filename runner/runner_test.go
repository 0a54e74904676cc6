package runner

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/examples"
	"github.com/gpu-mode/kbgen/payload"
)

// testSystem is the SystemInfo tests use instead of probing the machine.
var testSystem = payload.SystemInfo{GPU: "", DeviceCount: 1, CPU: "test cpu", Platform: "Linux-test", Hostname: "test"}

func needPython(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("python3 not on PATH: real-subprocess evaluation not tested")
	}
}

// example builds the job of a built-in example with a named submission.
func example(t *testing.T, name, submission string, mode payload.Mode) *payload.Config {
	t.Helper()
	src, err := examples.Submission(name, submission)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := examples.Config(name, mode, src)
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// evaluate runs cfg with test options and checks that nothing of the job
// outlives the evaluation.
func evaluate(t *testing.T, cfg *payload.Config, mutate ...func(*EvalOptions)) (*payload.FullResult, error) {
	t.Helper()
	opts := EvalOptions{
		WorkDir: t.TempDir(),
		Environ: os.Environ(),
		Probe:   FixedProbe(testSystem, false),
	}
	for _, m := range mutate {
		m(&opts)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := Evaluate(ctx, cfg, opts)
	if res == nil {
		t.Fatal("Evaluate returned no result")
	}
	if _, jerr := json.Marshal(res); jerr != nil {
		t.Fatalf("result does not marshal: %v", jerr)
	}
	assertNoDescendants(t)
	return res, err
}

// assertNoDescendants fails when a process started by the test is still
// alive (zombies aside).
func assertNoDescendants(t *testing.T) {
	t.Helper()
	if left := descendants(procTable(), os.Getpid(), nil); len(left) > 0 {
		var names []string
		for _, p := range left {
			b, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(p), "cmdline"))
			names = append(names, strings.ReplaceAll(string(b), "\x00", " "))
		}
		killTree(0, 0)
		t.Fatalf("processes outlived the evaluation: %v", names)
	}
}

var errNoSpace = syscallENOSPC()

// zipNames lists the files in a base64 zip.
func zipNames(t *testing.T, b64 string) []string {
	t.Helper()
	raw, err := base64.StdEncoding.DecodeString(b64)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
	}
	sort.Strings(names)
	return names
}
