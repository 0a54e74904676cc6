package hostfacts

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// dockerStandIn answers `docker image inspect --format {{.Id}} REF` as
// the docker CLI does (docker/cli cli/command/image/inspect.go): the id
// for the image it has, "Error: No such image: REF" and exit 1 for
// another; any other argv exits 3, so a changed question fails the test.
const dockerStandIn = `#!/bin/sh
[ "$1 $2 $3 $4" = 'image inspect --format {{.Id}}' ] || exit 3
case "$5" in
have:1) echo 'sha256:0123abcd' ;;
down:1) echo 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?' >&2; exit 1 ;;
slow:1) exec sleep 60 ;;
*) echo "Error: No such image: $5" >&2; exit 1 ;;
esac
`

// TestImagePulled: present, absent (the only "false"), and every case
// where docker cannot say (no docker on PATH, a daemon down, no ref):
// unknown, never "missing".
func TestImagePulled(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(dockerStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	for _, tc := range []struct {
		name, docker, ref string
		want              *bool
	}{
		{"present", "", "have:1", ptr(true)},
		{"absent", "", "ghcr.io/x/y@sha256:" + strings.Repeat("ab", 32), ptr(false)},
		{"a flag for a ref: not asked", "", "--help", nil},
		{"daemon down", "", "down:1", nil},
		{"no ref", "", "", nil},
		{"no docker", filepath.Join(t.TempDir(), "docker"), "have:1", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ImagePulled(context.Background(), tc.docker, tc.ref)
			if (got == nil) != (tc.want == nil) || (got != nil && *got != *tc.want) {
				t.Errorf("ImagePulled(%q) = %v, want %v", tc.ref, show(got), show(tc.want))
			}
		})
	}
}

// TestImagePulledTimeout: a docker that does not answer is unknown once
// the question's context ends (ImageTimeout, or the caller's sooner), not
// missing.
func TestImagePulledTimeout(t *testing.T) {
	bin := t.TempDir()
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(dockerStandIn), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if got := ImagePulled(ctx, filepath.Join(bin, "docker"), "slow:1"); got != nil {
		t.Errorf("slow docker: %v, want unknown", *got)
	}
}

func show(b *bool) string {
	if b == nil {
		return "unknown"
	}
	if *b {
		return "pulled"
	}
	return "missing"
}

// TestImagePulledRealDocker: the engine's own answer for an image it does
// not have reads as missing (the stand-in copies its message).
func TestImagePulledRealDocker(t *testing.T) {
	if err := exec.Command("docker", "version").Run(); err != nil {
		t.Skipf("no docker engine here: %v", err)
	}
	if got := ImagePulled(context.Background(), "", "kbgen-never-pulled.invalid/x:none"); got == nil || *got {
		t.Errorf("an absent image: %s, want missing", show(got))
	}
}
