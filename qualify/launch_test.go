package qualify

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// TestFailureReason: node qualify showed only docker's closing hint
// ("Run 'docker run --help' …") when a container could not start; the
// daemon's reason is the line before it (vendor bug of issue 19).
func TestFailureReason(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ name, stderr, want string }{
		{"docker without a GPU runtime",
			"docker: Error response from daemon: could not select device driver \"\" with capabilities: [[gpu]].\nRun 'docker run --help' for more information\n",
			`docker: Error response from daemon: could not select device driver "" with capabilities: [[gpu]].`},
		{"image not pulled",
			"Unable to find image 'ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1' locally\ndocker: Error response from daemon: pull access denied.\nSee 'docker run --help'.\nRun 'docker run --help' for more information.\n",
			"docker: Error response from daemon: pull access denied."},
		{"one-line error", "kbgen: calibrate: bad --cpus\n", "kbgen: calibrate: bad --cpus"},
		{"nothing said", "\n", "(nothing on stderr)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := failureReason(tc.stderr); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}

// TestRunReportsTheReason runs a process failing the way docker does and
// checks the error carries the reason, not the hint.
func TestRunReportsTheReason(t *testing.T) {
	t.Parallel()
	cmd := exec.Command("sh", "-c", `echo "docker: Error response from daemon: unknown runtime: nvidia." >&2; echo "Run 'docker run --help' for more information" >&2; exit 125`)
	_, err := run(cmd)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 125 {
		t.Fatalf("error %v: want docker's exit status 125", err)
	}
	// The message is the contract: the operator reads the daemon's reason.
	if !strings.Contains(err.Error(), "unknown runtime: nvidia.") || strings.Contains(err.Error(), "for more information") {
		t.Fatalf("error %v", err)
	}
}
