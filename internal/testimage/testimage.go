// Package testimage builds the small local images that
// the real-container tests run, with no registry: the image is a
// `docker import` of a rootfs tarball, tagged by its content so it is
// built once per machine and reused until its inputs change.
package testimage

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
)

// BusyboxPath is where Debian's busybox-static puts its binary.
const BusyboxPath = "/bin/busybox"

// RequireDocker skips the test, saying why, when no Docker engine answers.
func RequireDocker(t testing.TB) {
	t.Helper()
	if out, err := exec.Command("docker", "info", "--format", "{{.ServerVersion}}").CombinedOutput(); err != nil {
		t.Skipf("no usable Docker engine (docker info: %v: %s); real-container tests skipped", err, strings.TrimSpace(string(out)))
	}
}

// layoutVersion changes whenever the rootfs layout below changes, so a
// cached image of an older layout is not reused.
const layoutVersion = "1"

// Busybox returns the tag of a local image holding only a static busybox
// and its applet links (no kbgen: the sandbox mounts the host's), building
// it when this machine does not have it yet. It skips the test when Docker
// or busybox-static is missing.
func Busybox(t testing.TB) string {
	t.Helper()
	return busybox(t, "kbgen-test-busybox", nil)
}

// shellPython is python3 in the ShellPython image: busybox sh.
const shellPython = "#!/bin/sh\nexec /bin/busybox sh \"$@\"\n"

// ShellPython is Busybox plus a /usr/bin/python3 that is busybox sh, so a
// job's submission.py (and main) written in shell runs exactly where and
// as a Python submission runs: under `kbgen run`, as the container's
// user, with its pipes and out dir. The hostile-submission tests use it
// (no Python, no registry, in every CI run).
func ShellPython(t testing.TB) string {
	t.Helper()
	return busybox(t, "kbgen-test-shpython", map[string]string{"usr/bin/python3": shellPython})
}

// busybox builds (once) the busybox image named repo, with extra files
// (path → content, mode 0755) added.
func busybox(t testing.TB, repo string, extra map[string]string) string {
	t.Helper()
	RequireDocker(t)
	bb, err := os.ReadFile(BusyboxPath)
	if err != nil {
		t.Skipf("no %s (apt-get install busybox-static): %v", BusyboxPath, err)
	}
	h := sha256.New()
	h.Write(append([]byte(layoutVersion), bb...))
	paths := make([]string, 0, len(extra))
	for p := range extra {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		h.Write([]byte(p + "\x00" + extra[p] + "\x00"))
	}
	tag := repo + ":" + hex.EncodeToString(h.Sum(nil)[:6])
	if err := exec.Command("docker", "image", "inspect", tag).Run(); err == nil {
		return tag
	}
	applets, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		t.Fatalf("busybox --list: %v", err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := []string{"bin", "etc", "tmp", "work", "proc", "sys", "dev", "kbgen", "usr/local/bin"}
	for _, p := range paths {
		if d := filepath.Dir(p); !slices.Contains(dirs, d) {
			dirs = append(dirs, d)
		}
	}
	for _, d := range dirs {
		mode := int64(0o755)
		if d == "tmp" {
			mode = 0o1777
		}
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: mode}))
	}
	must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(bb))}))
	_, err = tw.Write(bb)
	must(t, err)
	for _, a := range strings.Fields(string(applets)) {
		if a == "busybox" {
			continue
		}
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeSymlink, Name: "bin/" + a, Linkname: "busybox", Mode: 0o777}))
	}
	passwd := "root:x:0:0:root:/root:/bin/sh\nkbgen:x:1000:1000:kbgen:/tmp:/bin/sh\n"
	group := "root:x:0:\nkbgen:x:1000:\n"
	for name, content := range map[string]string{"etc/passwd": passwd, "etc/group": group} {
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(content))}))
		_, err = io.WriteString(tw, content)
		must(t, err)
	}
	for _, name := range paths {
		must(t, tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(extra[name]))}))
		_, err = io.WriteString(tw, extra[name])
		must(t, err)
	}
	must(t, tw.Close())
	cmd := exec.Command("docker", "import", "-", tag)
	cmd.Stdin = &buf
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker import %s: %v: %s", tag, err, out)
	}
	return tag
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// PythonTag is the debootstrap image with python3 (the full standard
// library: the example harnesses import json, which python3-minimal lacks). Its content depends on
// the Debian mirror on the day it is built, so it is tagged by its recipe,
// not its bytes; `docker rmi` it to rebuild.
const PythonTag = "kbgen-test-python:bookworm-minbase-2"

// EnvPythonImage gates the tests that need PythonTag: building it runs
// debootstrap against the Debian mirror (about a minute and 250 MB), too
// slow and too networked for every CI run.
const EnvPythonImage = "KBGEN_TEST_PYTHON_IMAGE"

// Python returns PythonTag, building it with debootstrap when missing. It
// skips the test unless KBGEN_TEST_PYTHON_IMAGE=1 (or the image is already
// on this machine), or when debootstrap or root is missing.
func Python(t testing.TB) string {
	t.Helper()
	RequireDocker(t)
	if err := exec.Command("docker", "image", "inspect", PythonTag).Run(); err == nil {
		return PythonTag
	}
	if os.Getenv(EnvPythonImage) != "1" {
		t.Skipf("%s not built and %s is not 1; Python-in-container test skipped", PythonTag, EnvPythonImage)
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		t.Skip("no debootstrap (apt-get install debootstrap); Python-in-container test skipped")
	}
	if os.Geteuid() != 0 {
		t.Skip("debootstrap needs root; Python-in-container test skipped")
	}
	dir, err := os.MkdirTemp("", "kbgen-python-rootfs-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rootfs := filepath.Join(dir, "rootfs")
	mirror := os.Getenv("KBGEN_DEBIAN_MIRROR")
	if mirror == "" {
		mirror = "http://deb.debian.org/debian"
	}
	cmd := exec.Command("debootstrap", "--variant=minbase", "--include=python3", "bookworm", rootfs, mirror)
	if out, err := cmd.CombinedOutput(); err != nil {
		// The mirror is outside this repo's control: a machine that cannot
		// reach it cannot run this test, which says so instead of failing.
		t.Skipf("debootstrap of %s failed (mirror %s unreachable?); Python-in-container test skipped: %v\n%s", PythonTag, mirror, err, tailLines(string(out), 20))
	}
	// The runner user, so the image matches what runner images provide.
	f, err := os.OpenFile(filepath.Join(rootfs, "etc/passwd"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString("kbgen:x:1000:1000:kbgen:/tmp:/bin/sh\n")
	must(t, err)
	must(t, f.Close())
	tarCmd := exec.Command("tar", "-C", rootfs, "-c", ".")
	imp := exec.Command("docker", "import", "-", PythonTag)
	pipe, err := tarCmd.StdoutPipe()
	must(t, err)
	imp.Stdin = pipe
	var impOut bytes.Buffer
	imp.Stdout, imp.Stderr = &impOut, &impOut
	must(t, imp.Start())
	if err := tarCmd.Run(); err != nil {
		t.Fatalf("tar of the rootfs: %v", err)
	}
	if err := imp.Wait(); err != nil {
		t.Fatalf("docker import %s: %v: %s", PythonTag, err, impOut.String())
	}
	return PythonTag
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
