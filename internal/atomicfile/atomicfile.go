// Package atomicfile writes a file whole or not at all into a directory
// that someone else may write too: the container's out dir, where the
// submission (same uid) can plant a FIFO, a symlink or a directory under
// any name the runner will use (issue 25: a FIFO at result.json.tmp held
// the runner, and the GPU, until the step's timeout).
package atomicfile

import (
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// createFlags open only a file this call creates: O_EXCL fails on any
// name already there (a FIFO, a symlink: with O_CREAT the link is not
// followed), O_NOFOLLOW says so again, and O_NONBLOCK makes sure no open
// can wait on a FIFO's reader whatever the kernel decides about the rest.
const createFlags = os.O_WRONLY | os.O_CREATE | os.O_EXCL | syscall.O_NOFOLLOW | syscall.O_NONBLOCK | syscall.O_CLOEXEC

// Write writes data to path through a temporary file of a random name
// beside it, checked to be the regular file it created, then renamed over
// path: a reader sees the old file or the whole new one, and whatever
// stood at path (a FIFO, a symlink) is replaced, never opened. Nothing
// here blocks on what another writer of the directory planted.
func Write(path string, data []byte, perm os.FileMode) error {
	dir, base := filepath.Split(path)
	f, err := create(dir, "."+base+".")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = fill(f, data, perm)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
	}
	return err
}

// create opens a new file named prefix plus a random suffix in dir.
func create(dir, prefix string) (*os.File, error) {
	for range 100 {
		name := filepath.Join(dir, prefix+rand.Text()+".tmp")
		f, err := os.OpenFile(name, createFlags, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return f, err
	}
	return nil, fmt.Errorf("creating a temporary file in %s: every name taken", dir)
}

// fill checks that f is a regular file (what was opened, not what the
// name may point to by now), writes data and sets perm.
func fill(f *os.File, data []byte, perm os.FileMode) error {
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is not a regular file (%v)", f.Name(), fi.Mode().Type())
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	return f.Chmod(perm)
}
