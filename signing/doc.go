// Package signing makes and loads the JSON Web Key Sets that sign kbgen's
// pipelines. The files are the ones `buildkite-agent tool keygen` writes and
// `buildkite-agent start --job-verification-jwks-path` reads, so either tool can
// make keys for the other.
package signing
