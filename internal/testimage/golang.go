package testimage

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// EnvImageBuild gates the tests that build the runner images' Dockerfiles
// offline (images/images_test.go): a Go toolchain image, a module proxy and
// a full go build in a container take minutes.
const EnvImageBuild = "KBGEN_TEST_IMAGE_BUILD"

// Golang returns a local stand-in for the golang base image: the Python
// image plus this machine's Go toolchain at /usr/local/go on PATH, tagged by
// the toolchain's version, built when missing. It skips unless
// KBGEN_TEST_IMAGE_BUILD=1, and where the Python image cannot be had.
func Golang(t testing.TB) string {
	t.Helper()
	if os.Getenv(EnvImageBuild) != "1" {
		t.Skipf("%s is not 1: the runner images' offline build (minutes) skipped", EnvImageBuild)
	}
	base := Python(t)
	tag := "kbgen-test-golang:" + strings.ReplaceAll(runtime.Version(), "+", "-") + "-1"
	if err := exec.Command("docker", "image", "inspect", tag).Run(); err == nil {
		return tag
	}
	// The toolchain that runs the tests ("go env GOROOT"; runtime.GOROOT
	// is deprecated: it names where the test binary was built).
	out, err := exec.Command("go", "env", "GOROOT").Output()
	goroot := strings.TrimSpace(string(out))
	if err != nil || goroot == "" {
		t.Skipf("no Go toolchain to put in the image: go env GOROOT: %v", err)
	}
	if _, err := os.Stat(filepath.Join(goroot, "bin", "go")); err != nil {
		t.Skipf("no Go toolchain at %s to put in the image: %v", goroot, err)
	}
	// The toolchain directory is the build context; the Dockerfile comes on
	// stdin, so nothing is written into GOROOT.
	dockerfile := "FROM " + base + "\nCOPY . /usr/local/go\n" +
		"ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin\nUSER 0\n"
	cmd := exec.Command("docker", "build", "-q", "-t", tag, "-f", "-", goroot)
	cmd.Stdin = strings.NewReader(dockerfile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building %s: %v\n%s", tag, err, tailLines(string(out), 20))
	}
	return tag
}
