// Package plugincfg is the gpu-docker plugin's configuration, the contract
// between the generator (which writes it into the eval step), the signer
// (which signs it), and the sandbox (which reads it back from the agent's
// BUILDKITE_PLUGIN_GPU_DOCKER_* env). It lives apart from the step
// builders so that signing and the sandbox need not import them.
package plugincfg
