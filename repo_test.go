package kbgen

import (
	"bytes"
	"os"
	"os/exec"
	"testing"
)

// maxTrackedBytes bounds a file in the repository: the largest today are
// fixtures and golden files of tens of KiB.
const maxTrackedBytes = 1 << 20

// TestNoBuildOutputTracked: no compiled program or oversized file is
// committed. A 17 MB kbgen-e2e binary, built at the root by `go build
// ./cmd/kbgen-e2e`, was committed once (6aba816) and rode in every clone
// and image build context until it was found by hand.
func TestNoBuildOutputTracked(t *testing.T) {
	t.Parallel()
	out, err := exec.Command("git", "ls-files", "-z").Output()
	if err != nil {
		t.Skipf("SKIP: not a git checkout (git ls-files: %v)", err)
	}
	for _, name := range bytes.Split(bytes.TrimRight(out, "\x00"), []byte{0}) {
		f := string(name)
		st, err := os.Lstat(f)
		if err != nil || !st.Mode().IsRegular() {
			continue // deleted in the work tree, or a link
		}
		if st.Size() > maxTrackedBytes {
			t.Errorf("%s is %d bytes: a build output or data that belongs outside the repository?", f, st.Size())
		}
		head := make([]byte, 4)
		if fh, err := os.Open(f); err == nil {
			_, _ = fh.Read(head)
			fh.Close()
		}
		if bytes.Equal(head, []byte("\x7fELF")) {
			t.Errorf("%s is a compiled program (ELF): build outputs are not committed", f)
		}
	}
}
