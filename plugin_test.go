package kbgen

import (
	"io/fs"
	"os"
	"testing"
)

// files maps every regular file under fsys to its content.
func files(t *testing.T, fsys fs.FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(fsys, ".", func(name string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, name)
		out[name] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestGPUDockerPluginIsTheCheckouts: the plugin built into the binary is
// the repository's, file for file.
func TestGPUDockerPluginIsTheCheckouts(t *testing.T) {
	t.Parallel()
	got, want := files(t, GPUDockerPlugin()), files(t, os.DirFS(".buildkite/plugins/gpu-docker"))
	if _, ok := got["hooks/command"]; !ok {
		t.Fatalf("no hooks/command embedded: %v", got)
	}
	for name, data := range want {
		if got[name] != data {
			t.Errorf("%s: the embedded copy differs from the checkout's", name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			t.Errorf("%s embedded but not in the checkout", name)
		}
	}
}
