// Package exitcode is the one table of process exit codes that kbgen's
// commands, the generator's retry rules and the runner agree on. Scripts
// (the Kernelbot backend, Buildkite retry rules) branch on these numbers, so
// they are a contract: see docs/formats.md before changing one.
package exitcode

const (
	// OK: the command did what it was asked. For `kbgen run` this means the
	// evaluation ran, whatever the submission did.
	OK = 0
	// Failure: an unexpected internal error.
	Failure = 1
	// Usage: bad flags or arguments.
	Usage = 2
	// RunnerFailed: `kbgen submit`/`result` obtained a FullResult whose
	// success is false (the runner, not the submission, failed).
	RunnerFailed = 3
	// Infra: the Buildkite API, storage or the build itself failed in a way
	// that yields no result.
	Infra = 4
	// Timeout: `kbgen submit --timeout` (or `wait`) ran out; the build was
	// cancelled.
	Timeout = 5
	// Unconfirmed: `kbgen verify` finished, and the re-measurements did
	// not confirm the run (disputed: the spread beyond the noise bound;
	// inconclusive: too few clean re-runs on the same hardware).
	Unconfirmed = 6
	// BadJob (EX_DATAERR): the job itself is invalid (payload not base64,
	// not zlib, not JSON, schema violation, unsafe file name). Never retried.
	BadJob = 65
	// TempFail (EX_TEMPFAIL): the machine is at fault (no GPU visible, CUDA or
	// ROCm init failure, disk full, placement missing). Buildkite retries the
	// job on another agent.
	TempFail = 75
	// Canceled is 128+SIGTERM, the shell's status for a terminated
	// process: `kbgen run` stopped by SIGTERM or SIGINT (a cancelled
	// build).
	Canceled = 143
	// AgentLost is what Buildkite reports for a job whose agent vanished.
	AgentLost = -1
	// AgentInfra is what the agent reports for its own or the container
	// engine's failures.
	AgentInfra = 255
)
