package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/testimage"
)

// The helper runs beside the submission as its uid: not dumpable, its
// /proc files are root's and it cannot be ptraced (init does it; this
// test binary ran the same init).
func TestNotDumpable(t *testing.T) {
	t.Parallel()
	v, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_GET_DUMPABLE, 0, 0)
	if errno != 0 || v != 0 {
		t.Errorf("PR_GET_DUMPABLE = %d (%v), want 0", v, errno)
	}
}

// TestInImages runs the built helper as the sandbox would, in images
// without a GPU: where the image has glibc it starts and says NVML is
// missing (the runner then records that and uses nvidia-smi); where it
// has none (a static busybox image) it cannot start at all, which the
// client reports the same way.
func TestInImages(t *testing.T) {
	helper := kbgenbin.NVMLPath(t)
	tests := []struct {
		name  string
		image func(testing.TB) string
		want  string
		code  int // -1: any failure (docker's code for a failed exec varies)
	}{
		{"glibc image (Debian bookworm)", testimage.Python, `{"error":"loading NVML: ERROR_LIBRARY_NOT_FOUND"}`, 1},
		{"no libc (static busybox)", testimage.Busybox, "no such file or directory", -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			image := tc.image(t)
			cmd := exec.Command("docker", "run", "--rm", "--interactive", "--read-only", "--network", "none", "--cap-drop", "ALL",
				"--security-opt", "no-new-privileges", "--user", "1000:1000",
				"--mount", "type=bind,source="+helper+",target=/usr/local/bin/kbgen-nvml,readonly",
				"--entrypoint", "/usr/local/bin/kbgen-nvml", image)
			cmd.Stdin = strings.NewReader(`{"op":"sample"}` + "\n")
			out, code := combined(t, cmd)
			if (code != tc.code && (tc.code != -1 || code == 0)) || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, output %q; want exit %d saying %q", code, out, tc.code, tc.want)
			}
		})
	}
}

// TestCommandLine runs the built helper's two forms and a wrong one on
// this machine, which has no NVML: each says why, with its exit code.
func TestCommandLine(t *testing.T) {
	helper := kbgenbin.NVMLPath(t)
	tests := []struct {
		args   []string
		stdin  string
		code   int
		want   string
		noNVML bool // the answer of a machine without libnvidia-ml
	}{
		{nil, `{"op":"sample"}`, 1, `{"error":"loading NVML: ERROR_LIBRARY_NOT_FOUND"}`, true},
		{[]string{"inventory"}, "", 1, "kbgen-nvml: loading NVML: ERROR_LIBRARY_NOT_FOUND", true},
		{[]string{"sample"}, "", 2, "usage: kbgen-nvml", false},
	}
	out, _ := exec.Command("ldconfig", "-p").Output()
	hasNVML := strings.Contains(string(out), "libnvidia-ml.so.1")
	for _, tc := range tests {
		t.Run(strings.Join(append([]string{"kbgen-nvml"}, tc.args...), " "), func(t *testing.T) {
			if tc.noNVML && hasNVML {
				t.Skip("this machine has libnvidia-ml.so.1: the answer without NVML is not seen here (the GPU checklist runs the helper on the GPU)")
			}
			cmd := exec.Command(helper, tc.args...)
			cmd.Stdin = strings.NewReader(tc.stdin)
			out, code := combined(t, cmd)
			if code != tc.code || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, output %q; want exit %d saying %q", code, out, tc.code, tc.want)
			}
		})
	}
}

// combined runs cmd and returns its output and exit code; a command that
// cannot start fails the test.
func combined(t *testing.T, cmd *exec.Cmd) (string, int) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	if cmd.ProcessState == nil {
		t.Fatalf("%s did not start: %v", cmd.Path, err)
	}
	return string(out), cmd.ProcessState.ExitCode()
}
