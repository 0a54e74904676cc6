// Package resultfile is the result of a run on disk: result.json as
// Kernelbot's FullResult (indented, <, > and & as Python writes them),
// written atomically, and each profile trace beside it as
// profile_data/<run>.zip. The runner writes it in the container and the
// sandbox writes what it vouched for on the host: one definition for both,
// so the sandbox (and the node tooling that links it) need not link the
// runner.
package resultfile
