package sandbox

import (
	"encoding/json"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
	"github.com/gpu-mode/kbgen/signing"
)

// CheckStepSignature is kbgen's own check that the step about to run is
// the one `kbgen generate` signed, for agents (v3.52.1) that cannot verify
// Buildkite's step signature on a step with a plugin. On a node whose environment hook
// sets KBGEN_VERIFICATION_KEY it rebuilds the claim from what the sandbox
// acts on: the command argv, the plugin list and gpu-docker config, the
// StepEnv variables, the payload's checksum ("" without one) and the
// agent's queue, and verifies KBGEN_STEP_SIGNATURE against it. With no key
// configured nothing is checked. Errors: *signing.StepSignatureError (65),
// or a refusal.RefusedError (75) when this node's key file cannot be read.
func CheckStepSignature(lookup contract.Lookup, command []string, cfg plugincfg.GPUDocker, encodedPayload string) error {
	keyFile, _ := lookup(contract.EnvVerificationKey)
	if keyFile == "" {
		return nil
	}
	keys, err := signing.LoadPublic(keyFile)
	if err != nil {
		return refusal.Refusef("this node's verification key (%s): %v", contract.EnvVerificationKey, err)
	}
	claim := signing.StepClaim{
		Command: command,
		Plugins: pluginNames(lookup),
		Plugin:  cfg,
		Env:     signing.StepEnvOf(lookup),
		Queue:   agentQueue(lookup),
	}
	if encodedPayload != "" {
		claim.PayloadSHA256 = payload.Checksum(encodedPayload)
	}
	token, _ := lookup(contract.EnvStepSignature)
	return signing.VerifyStep(token, keys, claim)
}

// pluginNames lists the plugins of BUILDKITE_PLUGINS by name, in order;
// nil when it is unset or unreadable (ConfigFromEnv reports the latter).
func pluginNames(lookup contract.Lookup) []string {
	js, _ := lookup(contract.EnvPlugins)
	var list []map[string]json.RawMessage
	if json.Unmarshal([]byte(js), &list) != nil {
		return nil
	}
	var names []string
	for _, entry := range list {
		for source := range entry {
			names = append(names, plugincfg.PluginName(source))
		}
	}
	return names
}

// agentQueue is the queue of the agent running the job: its queue tag,
// or "default" when it exports none (as signing.CheckQueueBinding reads it).
func agentQueue(lookup contract.Lookup) string {
	if q, _ := lookup(contract.EnvAgentQueue); q != "" {
		return q
	}
	return "default"
}
