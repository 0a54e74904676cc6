package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/seal"
)

// lookup turns a map into an env lookup function.
var lookup = contract.MapLookup

// fakeSysfs writes thread_siblings_list files for cores given as sibling
// lists ("0,4" for CPUs 0 and 4 on one core) and returns the sysfs root.
func fakeSysfs(t testing.TB, cores ...cpulist.Set) string {
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
func smtPairs(offset int) []cpulist.Set {
	cores := make([]cpulist.Set, offset)
	for n := range offset {
		cores[n] = cpulist.Set{n, n + offset}
	}
	return cores
}

// sealerMain is the test binary run by testdata/fake-docker as the sealing
// runner (KBGEN_TEST_SEALER names the steering dir): the key from stdin,
// the envelope of the files `result` (default a passing result) and
// `noise` (when present) on stdout.
func sealerMain(dir string) int {
	key, err := seal.ReadKey(os.Stdin)
	if err != nil {
		os.Stderr.WriteString(err.Error() + "\n")
		return 1
	}
	c := seal.Contents{Result: []byte(`{"success": true, "error": "", "system": {}, "runs": {}}` + "\n")}
	if b, err := os.ReadFile(filepath.Join(dir, "result")); err == nil {
		c.Result = b
	}
	if b, err := os.ReadFile(filepath.Join(dir, "noise")); err == nil {
		c.Noise = b
	}
	if err := seal.Write(os.Stdout, key, c); err != nil {
		return 1
	}
	return 0
}

// sealing makes the stand-in docker seal a result as the runner would.
func sealing(t *testing.T, dir string) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	touch(t, dir, "sealer", self)
}
