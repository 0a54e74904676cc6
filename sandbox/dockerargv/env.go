package dockerargv

import (
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// PassedEnv are the host variables passed into the container, by name.
// An allow-list: the agent's token, the build's secrets and the payload
// itself (it travels as a file) never get in, whatever they are called.
// The noise policy holds thresholds only; the runner needs it to judge
// and retry (package noise).
var PassedEnv = []string{contract.EnvRunID, contract.EnvNoisePolicy}

// ContainerEnv is the container's whole environment: fixed entries plus
// the allowed host variables that are set, plus the job's retry count
// (BUILDKITE_RETRY_COUNT, renamed: no BUILDKITE_* variable gets in) so
// the runner retries external noise only once.
func ContainerEnv(lookup contract.Lookup) []string {
	env := []string{"HOME=/tmp", "TMPDIR=/tmp", contract.EnvInSandbox + "=1"}
	for _, k := range PassedEnv {
		if v, ok := lookup(k); ok && v != "" && !strings.ContainsAny(v, "\n\x00") {
			env = append(env, k+"="+v)
		}
	}
	if v, ok := lookup(contract.EnvBuildkiteRetryCount); ok {
		if _, err := strconv.Atoi(v); err == nil {
			env = append(env, contract.EnvRetryCount+"="+v)
		}
	}
	return env
}
