package sandbox

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Stage is the host side of a run's files: a private directory holding the
// payload file (mounted read-only). Nothing in it is writable from the
// container: the container's writable paths are all tmpfs (see Plan).
// Its path is deterministic per container so a stage left by a killed job
// is replaced, not accumulated.
type Stage struct {
	Dir         string
	PayloadFile string // "" when the run has no payload
	// Mode is the directory's: 0700 for a container (the zero value), 0711
	// for the process launcher, whose step reads the payload as its own
	// uid (it can open the payload, not list the directory).
	Mode os.FileMode
}

// NewStage names the stage for a container under base (the host's temp dir).
func NewStage(base, name string, withPayload bool) Stage {
	dir := filepath.Join(base, name)
	s := Stage{Dir: dir}
	if withPayload {
		s.PayloadFile = filepath.Join(dir, "payload")
	}
	return s
}

// Create makes the stage, replacing a stale one. The directory is 0700 (a
// container's) so other host users cannot read the payload; the payload file itself is
// 0444 because inside the container it is read as ContainerUser, not as
// the agent's user.
func (s Stage) Create(encodedPayload string) error {
	if err := os.RemoveAll(s.Dir); err != nil {
		return fmt.Errorf("removing stale stage: %w", err)
	}
	mode := s.Mode
	if mode == 0 {
		mode = 0o700
	}
	if err := os.Mkdir(s.Dir, mode); err != nil {
		return fmt.Errorf("creating stage: %w", err)
	}
	if err := os.Chmod(s.Dir, mode); err != nil { // umask
		return fmt.Errorf("creating stage: %w", err)
	}
	if s.PayloadFile != "" {
		if err := os.WriteFile(s.PayloadFile, []byte(encodedPayload), 0o444); err != nil {
			return fmt.Errorf("writing payload file: %w", err)
		}
		if err := os.Chmod(s.PayloadFile, 0o444); err != nil { // umask
			return fmt.Errorf("writing payload file: %w", err)
		}
	}
	return nil
}

// Remove deletes the stage.
func (s Stage) Remove() error { return os.RemoveAll(s.Dir) }

// ErrDynamic is a runner binary linked against a libc (it has an ELF
// interpreter), which the container's image need not have.
var ErrDynamic = errors.New("is dynamically linked")

// CheckStatic refuses a runner binary the container could not execute: it
// must be a statically linked ELF (CGO_ENABLED=0), because the image's libc
// is not the host's.
func CheckStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("runner binary %s is not a Linux executable (%v); build kbgen with CGO_ENABLED=0", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("runner binary %s %w; build kbgen with CGO_ENABLED=0", path, ErrDynamic)
		}
	}
	return nil
}
