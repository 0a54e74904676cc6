// Package golden compares test output with golden files and rewrites them
// on request. UPDATE_GOLDEN=1 go test ./... rewrites every golden file in
// the repo; an env var, not a flag, because `go test ./... -update` fails in
// every package that does not define the flag.
package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// EnvUpdate set to 1 makes Check write instead of compare.
const EnvUpdate = "UPDATE_GOLDEN"

// Update reports whether golden files are being rewritten.
func Update() bool { return os.Getenv(EnvUpdate) == "1" }

// Check compares got with the file at path, or writes it there (creating
// its directory) when Update is on.
func Check(t testing.TB, path string, got []byte) {
	t.Helper()
	if Update() {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (%s=1 go test writes it)", err, EnvUpdate)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (-got +want; %s=1 go test rewrites it if the change is intended):\n%s", path, EnvUpdate, Diff(got, want))
	}
}

// Diff is a line-by-line diff of got against want, "-" for got's lines and
// "+" for want's, unchanged lines around each change: a one-line change in
// a long file reads as that line, not as both files.
func Diff(got, want []byte) string {
	return cmp.Diff(string(got), string(want))
}
