package dockerargv

import (
	"slices"

	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// RunnerCommand is the container's command. `kbgen run ...` is pointed at
// the mounted payload and out dir, told not to upload (the container has
// no network and no agent token; the plugin hook uploads on the host) and
// to seal its result (package seal). Any other command runs as given.
func RunnerCommand(cmd []string) []string {
	return RunnerArgv(cmd, ContainerRunner, ContainerPayload, ContainerResult)
}

// RunnerArgv is RunnerCommand with the runner, payload and result paths
// given (the process launcher's are the host's).
func RunnerArgv(cmd []string, runner, payloadFile, result string) []string {
	if IsRunnerCommand(cmd) {
		out := []string{runner, "run", "--payload-file", payloadFile, "--out", result, "--no-upload", "--sealed"}
		return append(out, cmd[2:]...)
	}
	return slices.Clone(cmd)
}

// IsRunnerCommand reports whether cmd is `kbgen run`, which needs a payload.
func IsRunnerCommand(cmd []string) bool {
	return len(cmd) >= 2 && (cmd[0] == "kbgen" || cmd[0] == ContainerRunner) && cmd[1] == "run"
}

var nameUnsafe = lazyre.New(`[^A-Za-z0-9_.-]`)

// ContainerName is the container's name for a job: deterministic, so a
// container left behind by a killed job is found and removed by the next
// run on the agent.
func ContainerName(jobID string) string {
	return "kbgen-" + nameUnsafe.ReplaceAllString(jobID, "_")
}
