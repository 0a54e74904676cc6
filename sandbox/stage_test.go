package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestStageCreate(t *testing.T) {
	base := t.TempDir()
	s := NewStage(base, "kbgen-job-1", true)
	// A stage left by a killed job is replaced.
	if err := os.MkdirAll(filepath.Join(s.Dir, "out"), 0o755); err != nil {
		t.Fatal(err)
	}
	touch(t, filepath.Join(s.Dir, "out"), "result.json", "stale")
	if err := s.Create("eJxencoded"); err != nil {
		t.Fatal(err)
	}
	for path, want := range map[string]os.FileMode{s.Dir: 0o700 | os.ModeDir, s.PayloadFile: 0o444} {
		fi, err := os.Stat(path)
		if err != nil || fi.Mode() != want {
			t.Errorf("%s: mode %v, %v; want %v", path, fi.Mode(), err, want)
		}
	}
	if b, _ := os.ReadFile(s.PayloadFile); string(b) != "eJxencoded" {
		t.Errorf("payload file = %q", b)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "out")); !os.IsNotExist(err) {
		t.Errorf("stale result survived: %v", err)
	}
	if err := s.Remove(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Dir); !os.IsNotExist(err) {
		t.Errorf("stage not removed: %v", err)
	}
}

// TestCheckStatic: a dynamically linked runner (the host's /bin/sh) is
// refused as ErrDynamic; a file that is not ELF is refused too, as
// something else.
func TestCheckStatic(t *testing.T) {
	t.Parallel()
	if err := CheckStatic("/bin/sh"); !errors.Is(err, ErrDynamic) {
		t.Errorf("CheckStatic(/bin/sh) = %v, want ErrDynamic", err)
	}
	script := filepath.Join(t.TempDir(), "kbgen")
	if err := os.WriteFile(script, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckStatic(script); err == nil || errors.Is(err, ErrDynamic) {
		t.Errorf("CheckStatic(a script) = %v, want a refusal that is not ErrDynamic", err)
	}
}
