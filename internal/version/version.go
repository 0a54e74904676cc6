// Package version is kbgen's own identity: the release it was built as, the
// commit and the build date (stamped by scripts/release.sh through -ldflags
// -X), and the buildkite-agent versions it supports. The generator stamps it
// on every eval step (contract.EnvGeneratorVersion) so the sandbox can say
// when the two sides of a build were not the same kbgen.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at release time:
//
//	go build -ldflags "-X github.com/gpu-mode/kbgen/internal/version.Version=v1.2.0
//	  -X github.com/gpu-mode/kbgen/internal/version.Commit=<sha>
//	  -X github.com/gpu-mode/kbgen/internal/version.Date=<RFC 3339>"
//
// Unset, they come from the module's build info (a `go install …@v1.2.0`
// knows its version, a `go build` in a git checkout its commit); a test
// binary has neither and says "dev".
var (
	Version = ""
	Commit  = ""
	Date    = ""
)

// The buildkite-agent versions kbgen supports: MinAgent is the oldest
// whose behaviour kbgen relies on, TestedAgent the one its real-agent
// tests run (docs/vendor-onboarding.md#the-buildkite-agent).
const (
	MinAgent    = "v3.50.2"
	TestedAgent = "v3.52.1"
)

// Dev is the version of a build nobody stamped.
const Dev = "dev"

func init() {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		bi = &debug.BuildInfo{}
	}
	fill(bi)
}

// fill completes whatever -ldflags left empty from bi.
func fill(bi *debug.BuildInfo) {
	if Version == "" {
		Version = Dev
		if v := bi.Main.Version; v != "" && v != "(devel)" {
			Version = v
		}
	}
	for _, s := range bi.Settings {
		switch {
		case s.Key == "vcs.revision" && Commit == "":
			Commit = s.Value
		case s.Key == "vcs.time" && Date == "":
			Date = s.Value
		}
	}
}

// String is what `kbgen version` prints: one line a bug report can quote.
func String() string {
	commit, date := Commit, Date
	if commit == "" {
		commit = "unknown commit"
	}
	if date == "" {
		date = "unknown date"
	}
	return fmt.Sprintf("kbgen %s (%s, %s; %s, %s/%s)", Version, commit, date, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// AgentRange says which buildkite-agent versions kbgen works with.
func AgentRange() string {
	return fmt.Sprintf("buildkite-agent >= %s (tested with %s)", MinAgent, TestedAgent)
}
