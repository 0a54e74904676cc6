package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmdtest"

	"github.com/gpu-mode/kbgen/internal/golden"
)

// TestCLI runs the go-cmdtest transcripts in golden/cli/*.ct against kbgen
// in process. Each file starts in a fresh directory holding a copy of
// golden/cli/fixtures and of examples/, so a command line printed for the
// repository root (--task examples/vectoradd) runs there as printed.
func TestCLI(t *testing.T) {
	ts, err := cmdtest.Read("../../golden/cli")
	if err != nil {
		t.Fatal(err)
	}
	fixtures, err := filepath.Abs("../../golden/cli/fixtures")
	if err != nil {
		t.Fatal(err)
	}
	// Setup runs inside each file's temp dir, so paths must be absolute.
	examples, err := filepath.Abs("../../examples")
	if err != nil {
		t.Fatal(err)
	}
	ts.Setup = func(root string) error {
		if err := os.CopyFS(root, os.DirFS(fixtures)); err != nil {
			return err
		}
		return os.CopyFS(filepath.Join(root, "examples"), os.DirFS(examples))
	}
	ts.Commands["kbgen"] = cmdtest.InProcessProgram("kbgen", func() int { return realMain(os.Args[1:]) })
	ts.Run(t, golden.Update())
}
