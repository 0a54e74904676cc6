// Package pipelinegen turns a Kernelbot job and a vendor profile into the
// Buildkite pipeline that evaluates it: go-pipeline types in, YAML out. It
// also holds the vendor registry (one profile per queue). The upload to
// `buildkite-agent pipeline upload` is internal/bkagent's.
package pipelinegen
