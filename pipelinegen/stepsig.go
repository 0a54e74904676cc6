package pipelinegen

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/buildkite/go-pipeline"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/signing"
)

// SignEvalStep puts kbgen's own step signature (contract.EnvStepSignature,
// a JWS over signing.StepClaim) in the env of p's gpu-docker eval step, for
// `kbgen sandbox` to check on the agent host. The claim is taken from the
// step as the agent will store it (AsUploaded), so `$$` already is `$`.
// payloadSHA256 is payload.Checksum of the build's payload ("" for none).
// Call it before Sign: Buildkite's signature then covers this env too.
// A pipeline without such a step (no job, the Kubernetes backend, where
// no sandbox runs) is left as it is.
func SignEvalStep(p *pipeline.Pipeline, key jwk.Key, payloadSHA256 string) error {
	uploaded, err := AsUploaded(p)
	if err != nil {
		return err
	}
	claim, ok, err := EvalClaim(uploaded, payloadSHA256)
	if err != nil || !ok {
		return err
	}
	tok, err := signing.SignStep(claim, key)
	if err != nil {
		return err
	}
	step, err := EvalStep(p)
	if err != nil {
		return err
	}
	if step.Env == nil {
		step.Env = map[string]string{}
	}
	step.Env[contract.EnvStepSignature] = tok
	return nil
}

// EvalClaim is the claim for p's eval step, taken as it stands (pass an
// AsUploaded pipeline for what the agent sees); ok is false when p has no
// eval step with the gpu-docker plugin.
func EvalClaim(p *pipeline.Pipeline, payloadSHA256 string) (claim signing.StepClaim, ok bool, err error) {
	step, err := EvalStep(p)
	if err != nil {
		return claim, false, nil
	}
	var gpu *pipeline.Plugin
	var names []string
	for _, pl := range step.Plugins {
		names = append(names, plugincfg.PluginName(pl.Source))
		if plugincfg.PluginName(pl.Source) == plugincfg.PluginName(plugincfg.Source) {
			gpu = pl
		}
	}
	if gpu == nil {
		return claim, false, nil
	}
	b, err := json.Marshal(gpu.Config)
	if err != nil {
		return claim, false, fmt.Errorf("signing step: gpu-docker config: %w", err)
	}
	if err := json.Unmarshal(b, &claim.Plugin); err != nil {
		return claim, false, fmt.Errorf("signing step: gpu-docker config: %w", err)
	}
	claim.Command = strings.Fields(step.Command)
	claim.Plugins = names
	claim.Env = signing.StepEnvOf(contract.MapLookup(step.Env))
	claim.PayloadSHA256 = payloadSHA256
	claim.Queue = stepQueue(step)
	if claim.Queue == "" {
		claim.Queue = "default" // as Buildkite routes a step with no queue
	}
	return claim, true, nil
}
