package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// lookup turns a map into an env lookup function.
var lookup = contract.MapLookup

// fakeSysfs writes thread_siblings_list files for cores given as sibling
// lists ("0,4" for CPUs 0 and 4 on one core) and returns the sysfs root.
func fakeSysfs(t testing.TB, cores ...CPUSet) string {
	t.Helper()
	root := t.TempDir()
	for _, core := range cores {
		for _, c := range core {
			dir := filepath.Join(root, "devices/system/cpu", "cpu"+strconv.Itoa(c), "topology")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "thread_siblings_list"), []byte(core.String()+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return root
}

// smtPairs describes a machine whose CPU n and n+offset share a core, for
// n in [0, offset).
func smtPairs(offset int) []CPUSet {
	cores := make([]CPUSet, offset)
	for n := range offset {
		cores[n] = CPUSet{n, n + offset}
	}
	return cores
}
