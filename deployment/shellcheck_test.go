package deployment

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// shellScripts lists every shell script in the repository: *.sh, hooks
// (Buildkite's and the rendered golden ones), and anything with a sh/bash
// shebang.
func shellScripts(t *testing.T, root string) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); name == ".git" || name == "testdata" || name == "node_modules" {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() || strings.HasSuffix(p, ".tmpl") {
			return nil
		}
		if strings.HasSuffix(p, ".sh") || filepath.Base(filepath.Dir(p)) == "hooks" {
			files = append(files, p)
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		head := make([]byte, 64)
		n, _ := f.Read(head)
		line, _, _ := bytes.Cut(head[:n], []byte("\n"))
		if bytes.HasPrefix(line, []byte("#!")) && (bytes.Contains(line, []byte("bash")) || bytes.HasSuffix(line, []byte("/sh"))) {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestShellcheck runs shellcheck on every shell script in the repository.
func TestShellcheck(t *testing.T) {
	t.Parallel()
	files := shellScripts(t, "..")
	var names []string
	for _, f := range files {
		names = append(names, filepath.ToSlash(f))
	}
	for _, want := range []string{"../deployment/setup-node.sh", "../.buildkite/plugins/gpu-docker/hooks/command"} {
		if _, err := os.Stat(want); err == nil && !strings.Contains(strings.Join(names, " "), want) {
			t.Errorf("%s not found among the scripts: %v", want, names)
		}
	}
	if _, err := exec.LookPath("shellcheck"); err != nil {
		t.Skipf("shellcheck not installed (apt-get install shellcheck): %d scripts not checked", len(files))
	}
	out, err := exec.Command("shellcheck", append([]string{"--external-sources"}, files...)...).CombinedOutput()
	if err != nil {
		t.Errorf("shellcheck %d scripts: %v\n%s", len(files), err, out)
	}
}
