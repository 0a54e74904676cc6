package golden

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// recorder captures Check's verdict without failing the real test.
type recorder struct {
	testing.TB
	failed bool
	msg    string
}

func (r *recorder) Helper() {}
func (r *recorder) Errorf(format string, args ...any) {
	r.failed, r.msg = true, fmt.Sprintf(format, args...)
}
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true }

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "g.txt")
	t.Setenv(EnvUpdate, "1")
	Check(t, path, []byte("one\n"))
	if b, err := os.ReadFile(path); err != nil || string(b) != "one\n" {
		t.Fatalf("update did not write: %q %v", b, err)
	}
	t.Setenv(EnvUpdate, "")
	r := &recorder{TB: t}
	Check(r, path, []byte("one\n"))
	if r.failed {
		t.Error("equal output reported as different")
	}
	r = &recorder{TB: t}
	Check(r, path, []byte("two\n"))
	if !r.failed {
		t.Error("different output passed")
	}
	if !strings.Contains(r.msg, "-got +want") || !marked(r.msg, "-", "two") || !marked(r.msg, "+", "one") {
		t.Errorf("the failure is not a -got +want diff:\n%s", r.msg)
	}
	r = &recorder{TB: t}
	Check(r, filepath.Join(t.TempDir(), "missing"), nil)
	if !r.failed {
		t.Error("missing golden file passed")
	}
}

// TestDiff: a one-line change in a long text shows that line, each side
// marked, and not the unchanged lines far from it.
func TestDiff(t *testing.T) {
	t.Parallel()
	var want strings.Builder
	for i := range 100 {
		fmt.Fprintf(&want, "line %d\n", i)
	}
	got := strings.Replace(want.String(), "line 50\n", "line fifty\n", 1)
	d := Diff([]byte(got), []byte(want.String()))
	if !marked(d, "-", "line fifty") || !marked(d, "+", "line 50") {
		t.Errorf("diff does not mark got's line - and want's +:\n%s", d)
	}
	if strings.Contains(d, "line 10\n") || strings.Contains(d, "line 90\n") {
		t.Errorf("diff shows lines far from the change:\n%s", d)
	}
}

// marked reports whether diff has a line marked sign that holds text.
func marked(diff, sign, text string) bool {
	for _, l := range strings.Split(diff, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), sign) && strings.Contains(l, text) {
			return true
		}
	}
	return false
}
