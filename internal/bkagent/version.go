package bkagent

import (
	"fmt"
	"regexp"
	"strconv"
)

// TestedVersion is the buildkite-agent kbgen is tested with, everywhere:
// CI (.ci/run), the real-agent tests, deployment/setup-node.sh (which
// installs it; its agent_version must match), `kbgen doctor`. Control
// agents and nodes must run one version: a vendor agent verifies the step
// signatures the control agent's own version writes.
const TestedVersion = "3.52.1"

// MinVersion is the oldest agent kbgen accepts: v3.50.0 and v3.50.1
// multiply the job-status interval by a second twice
// (agent_worker.go, then job_runner.go), so a running job never sees a
// cancel or its timeout_in_minutes; v3.50.2 fixed it.
const MinVersion = "3.50.2"

// InstallHint is how to get TestedVersion as a binary named
// buildkite-agent (the module's is named agent).
const InstallHint = "GOBIN=/tmp/bkbin go install github.com/buildkite/agent/v3@v" + TestedVersion

// Version is an agent's X.Y.Z.
type Version [3]int

var versionRE = regexp.MustCompile(`version (\d+)\.(\d+)\.(\d+)`)

// ParseVersion reads `buildkite-agent --version` ("buildkite-agent version
// 3.52.1, build 8") or a bare "3.52.1".
func ParseVersion(s string) (Version, error) {
	m := versionRE.FindStringSubmatch(s)
	if m == nil {
		m = versionRE.FindStringSubmatch("version " + s)
	}
	if m == nil {
		return Version{}, fmt.Errorf("no agent version in %q", s)
	}
	var v Version
	for i := range v {
		v[i], _ = strconv.Atoi(m[i+1])
	}
	return v, nil
}

func (v Version) String() string { return fmt.Sprintf("%d.%d.%d", v[0], v[1], v[2]) }

// Less reports whether v is older than o.
func (v Version) Less(o Version) bool {
	for i := range v {
		if v[i] != o[i] {
			return v[i] < o[i]
		}
	}
	return false
}

// OldAgentError is an agent older than MinVersion: one a running job
// would never see a cancel or its timeout on.
type OldAgentError struct{ Version Version }

func (e *OldAgentError) Error() string {
	return fmt.Sprintf("buildkite-agent %s is older than %s: a running job would never see a cancel or its timeout; install %s", e.Version, MinVersion, TestedVersion)
}

// CheckVersion refuses an agent older than MinVersion with an
// *OldAgentError, saying why.
func CheckVersion(v Version) error {
	minV, _ := ParseVersion(MinVersion)
	if v.Less(minV) {
		return &OldAgentError{Version: v}
	}
	return nil
}
