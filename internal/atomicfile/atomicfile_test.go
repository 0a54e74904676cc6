package atomicfile

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Whatever another writer of the directory planted under the file's name
// or the old fixed temporary name (a FIFO, a symlink to a file outside,
// a FIFO behind a symlink) is replaced or ignored, never opened: Write
// returns at once with the data in place.
func TestWriteOverPlanted(t *testing.T) {
	t.Parallel()
	plants := map[string]func(t *testing.T, path string){
		"nothing": func(*testing.T, string) {},
		"FIFO at the name": func(t *testing.T, path string) {
			mkfifo(t, path)
		},
		"FIFO at name.tmp": func(t *testing.T, path string) {
			mkfifo(t, path+".tmp")
		},
		"symlink to a file outside": func(t *testing.T, path string) {
			outside := filepath.Join(t.TempDir(), "victim")
			if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if b, _ := os.ReadFile(outside); string(b) != "keep" {
					t.Errorf("the symlink's target was written: %q", b)
				}
			})
			if err := os.Symlink(outside, path); err != nil {
				t.Fatal(err)
			}
		},
		"symlink to a FIFO": func(t *testing.T, path string) {
			fifo := filepath.Join(t.TempDir(), "fifo")
			mkfifo(t, fifo)
			if err := os.Symlink(fifo, path); err != nil {
				t.Fatal(err)
			}
		},
	}
	for name, plant := range plants {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			path := filepath.Join(t.TempDir(), "result.json")
			plant(t, path)
			done := make(chan error, 1)
			go func() { done <- Write(path, []byte("{}\n"), 0o644) }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("Write blocked on what was planted")
			}
			fi, err := os.Lstat(path)
			if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm() != 0o644 {
				t.Fatalf("%s: %v %v, want a regular 0644 file", path, fi.Mode(), err)
			}
			if b, _ := os.ReadFile(path); string(b) != "{}\n" {
				t.Errorf("content %q", b)
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(path), ".result.json.*"))
			if len(left) > 0 {
				t.Errorf("temporary files left: %v", left)
			}
		})
	}
}

// A directory standing at the name is an error, and no temporary file is
// left behind.
func TestWriteFailsCleanly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "result.json")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := Write(path, []byte("x"), 0o644); err == nil {
		t.Fatal("wrote over a directory")
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".result.json.*")); len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

func mkfifo(t *testing.T, path string) {
	t.Helper()
	if err := syscall.Mkfifo(path, 0o644); err != nil {
		t.Fatal(err)
	}
}
