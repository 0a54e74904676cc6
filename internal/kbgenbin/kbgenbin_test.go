package kbgenbin

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The cache key follows what goes into the binary, and only that: an
// edited source or embedded file is a new build, an edited test, golden
// file or doc is not.
func TestSourceKey(t *testing.T) {
	root := t.TempDir()
	write := func(rel, content string) {
		t.Helper()
		p := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	key := func() string {
		t.Helper()
		k, err := sourceKey(root)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	write("go.mod", "module x\n")
	write("a/a.go", "package a\n")
	write("examples/vectoradd/task.yml", "lang: py\n")
	base := key()
	for _, same := range []string{"a/a_test.go", "a/testdata/in.txt", "golden/x.yml", "docs/x.md", ".git/HEAD"} {
		write(same, "changed\n")
		if k := key(); k != base {
			t.Errorf("editing %s changed the key", same)
		}
	}
	for _, changed := range []string{"a/a.go", "examples/vectoradd/task.yml", "go.mod"} {
		write(changed, "changed "+changed+"\n")
		k := key()
		if k == base {
			t.Errorf("editing %s kept the key", changed)
		}
		base = k
	}
}

// Path builds this module's kbgen once, static, runnable by anyone.
func TestPath(t *testing.T) {
	if testing.Short() {
		t.Skip("builds kbgen")
	}
	bin := Path(t)
	if again := Path(t); again != bin {
		t.Errorf("second call: %s, first: %s", again, bin)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "kbgen") {
		t.Fatalf("kbgen version: %v: %s", err, out)
	}
	st, err := os.Stat(bin)
	if err != nil || st.Mode().Perm()&0o005 != 0o005 {
		t.Errorf("binary mode %v (%v): others cannot run it", st.Mode(), err)
	}
	if out, err := exec.Command("file", bin).Output(); err == nil && strings.Contains(string(out), "dynamically linked") {
		t.Errorf("binary is dynamically linked: %s", out)
	}
}
