// Package e2e runs kbgen's whole Buildkite path on this machine: a local
// Buildkite (fakebuildkite.NewLive), the repository the agents check out,
// and real `buildkite-agent start` processes configured the way
// `kbgen node install` configures a vendor node. The end-to-end tests and
// `kbgen doctor --e2e` are built on it.
package e2e
