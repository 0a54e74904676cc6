package pipelinegen

import (
	"slices"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/signing"
)

// TestSignEvalStep: for every vendor, a signed gpu-docker eval step carries
// KBGEN_STEP_SIGNATURE and every other variable of its env is one the
// claim covers (signing.StepEnv), so none can be changed unseen; a
// Kubernetes step (no sandbox on its path) gets none. The host side
// (sandbox) verifies these signatures in its own tests.
func TestSignEvalStep(t *testing.T) {
	t.Parallel()
	priv, pub := testKeys(t, signing.DefaultAlgorithm)
	reg, err := registry.Load("")
	if err != nil {
		t.Fatal(err)
	}
	const sum = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, v := range reg.Vendors {
		t.Run(v.Queue, func(t *testing.T) {
			t.Parallel()
			in, err := ExampleJobFor(v, v.PreferMode(payload.ModeLeaderboard))
			if err != nil {
				t.Fatal(err)
			}
			p, err := Generate(Job{Input: in, RunID: "r-$x", Queue: v.Queue, User: "u"}, v, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := SignEvalStep(p, priv, sum); err != nil {
				t.Fatal(err)
			}
			step := evalOf(t, p)
			tok := step.Env[contract.EnvStepSignature]
			if v.Backend == registry.BackendKubernetes {
				if tok != "" {
					t.Errorf("a Kubernetes eval step got a step signature")
				}
				return
			}
			for k := range step.Env {
				if k != contract.EnvStepSignature && !slices.Contains(signing.StepEnv, k) {
					t.Errorf("the eval step sets %s, which signing.StepEnv does not cover", k)
				}
			}
			uploaded, err := AsUploaded(p)
			if err != nil {
				t.Fatal(err)
			}
			claim, ok, err := EvalClaim(uploaded, sum)
			if err != nil || !ok {
				t.Fatalf("EvalClaim: %v, %v", ok, err)
			}
			if claim.Env[contract.EnvRunID] != "r-$x" || claim.Queue != v.Queue || claim.Plugin.Image != v.Image {
				t.Errorf("claim %+v: want the run id as given, r-$x, queue %s, image %s", claim, v.Queue, v.Image)
			}
			if err := signing.VerifyStep(tok, pub, claim); err != nil {
				t.Errorf("the step's signature does not verify its own claim: %v", err)
			}
		})
	}
}
