// Package pipelinegen turns a Kernelbot job and a vendor profile (package
// registry) into the Buildkite pipeline that evaluates it: go-pipeline
// types in, YAML out. The upload to `buildkite-agent pipeline upload` is
// internal/bkagent's.
package pipelinegen
