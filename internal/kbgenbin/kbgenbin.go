// Package kbgenbin builds the kbgen binary for the tests that need a real
// process (a container's runner, an unprivileged user, /proc/<pid>/environ,
// the command lines the docs print), and beside it kbgen-e2e for the tests
// of `kbgen doctor --e2e` (E2EPath). It builds once: each package's test
// process asks Path, and the binary is cached in a directory under
// os.TempDir() named by a hash of the module's sources, so every package of
// one `go test ./...` shares one build and an edit gets a fresh one.
//
// The binary is static (CGO_ENABLED=0) so it runs in any image, and its
// directory is world-readable so an unprivileged user can run it.
package kbgenbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	once sync.Once
	path string
	err  error

	e2eOnce sync.Once
	e2ePath string
	e2eErr  error

	nvmlOnce sync.Once
	nvmlPath string
	nvmlErr  error
)

// Path returns the path of a kbgen built from this module's sources,
// building it on first use.
func Path(t testing.TB) string {
	t.Helper()
	once.Do(func() { path, err = build("kbgen") })
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// E2EPath builds kbgen-e2e (cmd/kbgen-e2e, `kbgen doctor --e2e`) beside
// Path's kbgen, where kbgen looks for it, and returns its path. Only the
// tests that need it pay for its build.
func E2EPath(t testing.TB) string {
	t.Helper()
	Path(t)
	e2eOnce.Do(func() { e2ePath, e2eErr = build("kbgen-e2e") })
	if e2eErr != nil {
		t.Fatal(e2eErr)
	}
	return e2ePath
}

// NVMLPath builds kbgen-nvml (cgo: it loads NVML) and returns its path.
// It is not beside Path's kbgen, where kbgen would find and start it:
// every other test's noise record would then depend on whether this one
// ran first. Tests that want it beside a kbgen copy both. It skips the
// test where there is no C compiler.
func NVMLPath(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (cc): kbgen-nvml, which needs cgo, not built")
	}
	nvmlOnce.Do(func() {
		nvmlPath, nvmlErr = buildIn("nvml", "kbgen-nvml", "CGO_ENABLED=1", "CGO_CFLAGS=-O2 -Wno-deprecated-declarations")
	})
	if nvmlErr != nil {
		t.Fatal(nvmlErr)
	}
	return nvmlPath
}

// build builds ./cmd/<name> static into the cache directory of the
// current sources, unless it is there already.
func build(name string) (string, error) {
	return buildIn("", name, "CGO_ENABLED=0")
}

// buildIn builds ./cmd/<name> with env into sub of the cache directory of
// the current sources, unless it is there already.
func buildIn(sub, name string, env ...string) (string, error) {
	root, err := moduleRoot()
	if err != nil {
		return "", err
	}
	key, err := sourceKey(root)
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), "kbgen-test-bin", key, sub)
	bin := filepath.Join(dir, name)
	if _, err := os.Stat(bin); err == nil {
		return bin, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	// Another package's test process may build the same key at the same
	// time: each writes its own file and renames it into place, atomically.
	tmp, err := os.CreateTemp(dir, name+"-*.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	cmd := exec.Command("go", "build", "-o", tmp.Name(), "./cmd/"+name)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %v\n%s", name, err, out)
	}
	for _, d := range []string{filepath.Join(os.TempDir(), "kbgen-test-bin"), filepath.Join(os.TempDir(), "kbgen-test-bin", key), dir} {
		if err := os.Chmod(d, 0o755); err != nil {
			return "", err
		}
	}
	if err := os.Chmod(tmp.Name(), 0o755); err != nil {
		return "", err
	}
	pruneOld(filepath.Join(os.TempDir(), "kbgen-test-bin"))
	return bin, os.Rename(tmp.Name(), bin)
}

// pruneOld removes builds of other sources not made in the last day: each
// edit leaves one behind, and other checkouts on this machine may still be
// using a recent one.
func pruneOld(cache string) {
	ents, _ := os.ReadDir(cache)
	for _, e := range ents {
		if info, err := e.Info(); err == nil && e.IsDir() && time.Since(info.ModTime()) > 24*time.Hour {
			_ = os.RemoveAll(filepath.Join(cache, e.Name()))
		}
	}
}

// moduleRoot is the directory holding go.mod, from the test's working
// directory (its package directory) up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("kbgenbin: no go.mod above the working directory")
		}
		dir = parent
	}
}

// sourceKey hashes what goes into the binary: every file of the module
// except tests, test data, golden files, docs and VCS metadata (embedded
// files such as examples/ and vendors.yaml count).
func sourceKey(root string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "golden" || name == "docs") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(name, "_test.go") || !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		fmt.Fprintf(h, "%s\x00", rel)
		_, err = io.Copy(h, f)
		return err
	})
	if err != nil {
		return "", err
	}
	goVersion, _ := exec.Command("go", "env", "GOVERSION").Output()
	h.Write(goVersion)
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}
