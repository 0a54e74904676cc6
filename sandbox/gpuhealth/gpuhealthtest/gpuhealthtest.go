// Package gpuhealthtest (tests only) is the stand-in GPU node the
// clean-GPU check's tests and the sandbox's job tests share: a stand-in
// nvidia-smi (and sudo, for the reset) answering from CSV files, two GPU
// UUIDs on known buses, and the refusal every dirty GPU must be.
package gpuhealthtest

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// CleanUUID is a GPU on bus 3b, OtherUUID one on bus 5e.
const (
	CleanUUID = "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	OtherUUID = "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a00"
)

// Testdata is gpuhealth's testdata directory (the stand-in tools and the
// kernel log fixtures), wherever the test runs.
func Testdata() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(filepath.Dir(file)), "testdata")
}

// StandInSMI links testdata/stand-in-nvidia-smi (and stand-in-sudo, for
// the reset) into a directory with the CSV it prints: state for
// --query-gpu, apps for --query-compute-apps and remaps for
// --query-remapped-rows (none: it fails as an old driver does), and
// returns that directory for PATH.
func StandInSMI(t testing.TB, state, apps string, remaps ...string) string {
	t.Helper()
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("state.csv", state)
	write("apps.csv", apps)
	if len(remaps) > 0 {
		write("remaps.csv", remaps[0])
	}
	for _, name := range []string{"nvidia-smi", "sudo"} {
		if err := os.Symlink(filepath.Join(Testdata(), "stand-in-"+name), filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// GPURow is nvidia-smi's --query-gpu row of a GPU on bus 3b (CleanUUID)
// or 5e (OtherUUID).
func GPURow(uuid, used, ecc string) string {
	bus := map[string]string{CleanUUID: "00000000:3B:00.0", OtherUUID: "00000000:5E:00.0"}[uuid]
	return uuid + ", " + bus + ", " + used + ", " + ecc + "\n"
}

// WantRefusal fails t unless err is a refusal (a RefusedError: exit 75,
// exitcode.Of of sandbox's errors) saying want; want "" wants no error.
func WantRefusal(t testing.TB, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("refused a clean GPU: %v", err)
		}
		return
	}
	// The message is the contract: the job log names each problem for the operator.
	if !refusal.IsRefused(err) || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want a refusal (75) saying %q", err, want)
	}
}
