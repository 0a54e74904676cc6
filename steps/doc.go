// Package steps builds the Buildkite steps kbgen's generator emits: the eval
// step per backend, its plugin blocks, retry rules, timeouts and priority.
package steps
