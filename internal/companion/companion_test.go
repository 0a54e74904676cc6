package companion

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFind: the first executable of that name on the search path; a file
// that is not executable, a directory and a relative PATH entry do not count.
func TestFind(t *testing.T) {
	t.Parallel()
	exe, plain, dir := t.TempDir(), t.TempDir(), t.TempDir()
	for _, f := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Join(exe, "tool"), 0o755}, {filepath.Join(plain, "tool"), 0o644}} {
		if err := os.WriteFile(f.path, []byte("#!/bin/sh\n"), f.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Mkdir(filepath.Join(dir, "tool"), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, want string
	}{
		{"on PATH", exe, filepath.Join(exe, "tool")},
		{"skips a non-executable file", strings.Join([]string{plain, exe}, ":"), filepath.Join(exe, "tool")},
		{"skips a directory", strings.Join([]string{dir, exe}, ":"), filepath.Join(exe, "tool")},
		{"skips a relative entry", "relative/dir", ""},
		{"absent", plain, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, ok := Find("tool", tt.path)
			if got != tt.want || ok != (tt.want != "") {
				t.Errorf("Find = %q, %v; want %q", got, ok, tt.want)
			}
		})
	}
}
