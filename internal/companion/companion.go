// Package companion finds kbgen's companion binaries: programs shipped
// beside kbgen rather than linked into it (kbgen-e2e, which carries a
// local Buildkite that the main binary must not pay for at start-up).
package companion

import (
	"fmt"
	"os"
	"path/filepath"
)

// E2E is the binary that runs `kbgen doctor --e2e` (cmd/kbgen-e2e).
const E2E = "kbgen-e2e"

// Kbgen is the main binary, which kbgen-e2e hands to the agent it starts.
const Kbgen = "kbgen"

// BuildHint says how to put name beside an installed kbgen, from a
// checkout of the repository.
func BuildHint(name string) string {
	return fmt.Sprintf(`CGO_ENABLED=0 go build -o "$(dirname "$(command -v kbgen)")/%s" ./cmd/%s`, name, name)
}

// Find returns the absolute path of the executable name: the one in the
// running binary's own directory first (a release ships them together),
// then the first on searchPath (a PATH value). ok is false when neither
// exists.
func Find(name, searchPath string) (path string, ok bool) {
	var dirs []string
	if self, err := os.Executable(); err == nil {
		if real, err := filepath.EvalSymlinks(self); err == nil {
			self = real
		}
		dirs = append(dirs, filepath.Dir(self))
	}
	dirs = append(dirs, filepath.SplitList(searchPath)...)
	for _, dir := range dirs {
		if dir == "" || !filepath.IsAbs(dir) {
			continue // a relative PATH entry would depend on the working directory
		}
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, true
		}
	}
	return "", false
}

func isExecutable(p string) bool {
	info, err := os.Stat(p)
	return err == nil && info.Mode().IsRegular() && info.Mode().Perm()&0o111 != 0
}
