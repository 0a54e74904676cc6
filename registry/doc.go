// Package registry is the vendor registry: one profile per Buildkite
// queue (GPU, runtime, image, a step's limits and shape, noise policy),
// read from the embedded vendors.yaml or an operator's file, validated,
// and looked up by queue name or alias. It is a contract that the
// generator, kbgen serve, the node commands and qualify all read, so it
// lives apart from any of them: importing it links no generator and no
// examples.
package registry
