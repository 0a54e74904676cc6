package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
	"github.com/gpu-mode/kbgen/signing"
)

func keygen(t *testing.T, dir string, extra ...string) (priv, pub string) {
	t.Helper()
	priv, pub = filepath.Join(dir, "signing.json"), filepath.Join(dir, "jwks.json")
	args := append([]string{"keygen", "--private-out", priv, "--public-out", pub}, extra...)
	r := runKbgen(t, nil, "", args...)
	if r.code != 0 {
		t.Fatalf("keygen exit %d: %s", r.code, r.stderr)
	}
	return priv, pub
}

func TestKeygenWritesAgentCompatibleJWKS(t *testing.T) {
	for _, alg := range signing.Algorithms {
		t.Run(alg, func(t *testing.T) {
			priv, pub := keygen(t, t.TempDir(), "--alg", alg, "--key-id", "kernelbot-test")
			st, err := os.Stat(priv)
			if err != nil {
				t.Fatal(err)
			}
			if st.Mode().Perm() != 0o600 {
				t.Errorf("private key mode %v, want 0600", st.Mode().Perm())
			}
			k, err := signing.LoadPrivate(priv, "kernelbot-test")
			if err != nil {
				t.Fatal(err)
			}
			if a, _ := k.Algorithm(); a.String() != alg {
				t.Errorf("alg %s, want %s", a, alg)
			}
			set, err := signing.LoadPublic(pub)
			if err != nil {
				t.Fatal(err)
			}
			if ids := signing.KeyIDs(set); len(ids) != 1 || ids[0] != "kernelbot-test" {
				t.Errorf("public key ids %v", ids)
			}
			// The files must not be swappable: each loader refuses the other.
			if _, err := signing.LoadPrivate(pub, ""); err == nil {
				t.Error("public JWKS accepted as a signing key")
			}
			if _, err := signing.LoadPublic(priv); err == nil {
				t.Error("private JWKS accepted as verification keys (it would hand vendors the signing key)")
			}
		})
	}
}

func TestKeygenRefusesOverwrite(t *testing.T) {
	dir := t.TempDir()
	priv, pub := keygen(t, dir)
	before, _ := os.ReadFile(priv)
	r := runKbgen(t, nil, "", "keygen", "--private-out", priv, "--public-out", pub)
	if r.code != exitcode.Usage || !strings.Contains(r.stderr, "exists; pass --force") {
		t.Fatalf("second keygen: exit %d, %q", r.code, r.stderr)
	}
	if after, _ := os.ReadFile(priv); string(after) != string(before) {
		t.Fatal("the existing key was replaced without --force")
	}
	// A pre-existing world-readable file is replaced by a 0600 one.
	if err := os.Chmod(priv, 0o644); err != nil {
		t.Fatal(err)
	}
	keygen(t, dir, "--force")
	after, _ := os.ReadFile(priv)
	if string(after) == string(before) {
		t.Fatal("--force did not write a new key")
	}
	if st, _ := os.Stat(priv); st.Mode().Perm() != 0o600 {
		t.Errorf("after --force the private key is %v", st.Mode().Perm())
	}
}

func TestKeygenBadInput(t *testing.T) {
	dir := t.TempDir()
	for name, args := range map[string][]string{
		"hmac":      {"--alg", "HS512"},
		"rsa-pkcs1": {"--alg", "RS256"},
		"same file": {"--public-out", filepath.Join(dir, "a")},
	} {
		t.Run(name, func(t *testing.T) {
			base := []string{"keygen", "--private-out", filepath.Join(dir, "a"), "--public-out", filepath.Join(dir, "b")}
			r := runKbgen(t, nil, "", append(base, args...)...)
			if r.code != exitcode.Usage || strings.Count(r.stderr, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
			}
		})
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Error("a refused keygen still wrote a file")
	}
}

func TestGenerateSigns(t *testing.T) {
	dir := t.TempDir()
	priv, pub := keygen(t, dir, "--key-id", "k1")
	const repo = "git@github.com:gpu-mode/kernelbot-runs.git"
	env := payload.SplitEnv(exampleEncoded(t))
	env[contract.EnvQueue] = "h100"
	env[contract.EnvRunID] = "run-$BUILDKITE_AGENT_ACCESS_TOKEN"
	env["KBGEN_SIGNING_KEY"] = priv
	env["BUILDKITE_REPO"] = repo
	r := runKbgen(t, env, "", "generate")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	// By default only kbgen's own step signature: Buildkite's would make
	// every v3.52.1 agent refuse the step.
	if strings.Contains(r.stdout, "signature:") || !strings.Contains(r.stdout, contract.EnvStepSignature) || !strings.Contains(r.stderr, `signed 1 step(s) with key "k1"`) {
		t.Fatalf("want only KBGEN_STEP_SIGNATURE:\n%s\n%s", r.stdout, r.stderr)
	}
	r = runKbgen(t, env, "", "generate", "--agent-signature")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	if !strings.Contains(r.stdout, "signature:") || !strings.Contains(r.stderr, `signed 1 step(s) with key "k1"`) {
		t.Fatalf("no signature:\n%s\n%s", r.stdout, r.stderr)
	}
	p, err := pipelinegen.Parse([]byte(r.stdout))
	if err != nil {
		t.Fatal(err)
	}
	keys, err := signing.LoadPublic(pub)
	if err != nil {
		t.Fatal(err)
	}
	if err := pipelinegen.Verify(context.Background(), p, keys, repo); err != nil {
		t.Fatalf("kbgen generate's own output does not verify: %v", err)
	}
	if err := pipelinegen.Verify(context.Background(), p, keys, "https://github.com/other/repo.git"); err == nil {
		t.Fatal("verified for another repository")
	}

	// A build with no job (an ordinary push) still gets its no-op pipeline;
	// it has no command step, so nothing is signed or claimed to be.
	r = runKbgen(t, map[string]string{"KBGEN_SIGNING_KEY": priv, "BUILDKITE_REPO": repo}, "", "generate")
	if r.code != 0 || !strings.Contains(r.stdout, "no-kernelbot-job") || strings.Contains(r.stderr, "signed") {
		t.Fatalf("no-job build: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}

	// Flags beat the env; --signing-key-id picks a key from a rotation set.
	r = runKbgen(t, env, "", "generate", "--repo-url", "https://x/y.git", "--signing-key-id", "nope")
	if r.code != exitcode.Usage || !strings.Contains(r.stderr, `no key with id "nope"`) {
		t.Fatalf("unknown key id: exit %d, %q", r.code, r.stderr)
	}
}

func TestGenerateSigningErrors(t *testing.T) {
	dir := t.TempDir()
	priv, pub := keygen(t, dir)
	env := payload.SplitEnv(exampleEncoded(t))
	env[contract.EnvQueue] = "h100"
	for name, c := range map[string]struct {
		env  map[string]string
		code int
		msg  string
	}{
		"no repo":        {map[string]string{"KBGEN_SIGNING_KEY": priv}, exitcode.Usage, "--repo-url or set BUILDKITE_REPO"},
		"missing file":   {map[string]string{"KBGEN_SIGNING_KEY": filepath.Join(dir, "none.json"), "BUILDKITE_REPO": "r"}, exitcode.Usage, "reading signing key"},
		"public key":     {map[string]string{"KBGEN_SIGNING_KEY": pub, "BUILDKITE_REPO": "r"}, exitcode.Usage, "holds a public key"},
		"not a key file": {map[string]string{"KBGEN_SIGNING_KEY": "/dev/null", "BUILDKITE_REPO": "r"}, exitcode.Usage, "parsing signing key"},
	} {
		t.Run(name, func(t *testing.T) {
			e := map[string]string{}
			for k, v := range env {
				e[k] = v
			}
			for k, v := range c.env {
				e[k] = v
			}
			r := runKbgen(t, e, "", "generate")
			if r.code != c.code || !strings.Contains(r.stderr, c.msg) || strings.Count(r.stderr, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want %d and %q", r.code, r.stderr, c.code, c.msg)
			}
			if r.stdout != "" {
				t.Errorf("an unsigned pipeline was printed despite the signing error:\n%s", r.stdout)
			}
		})
	}
}
