package scripts_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/sandbox"
)

// throwawayKey makes an ed25519 key pair in dir and an allowed-signers
// file listing it for the kbgen-release namespace, as
// deployment/allowed_signers lists the project's key.
func throwawayKey(t *testing.T, dir, name string) (key, signers string) {
	t.Helper()
	key = filepath.Join(dir, name)
	if out, err := exec.Command("ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", key).CombinedOutput(); err != nil {
		t.Fatalf("ssh-keygen: %v\n%s", err, out)
	}
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(pub))
	signers = filepath.Join(dir, name+".allowed_signers")
	if err := os.WriteFile(signers, []byte(`kbgen-release namespaces="kbgen-release" `+f[0]+" "+f[1]+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return key, signers
}

// release runs scripts/release.sh for amd64 into a scratch dist with env.
func release(t *testing.T, env ...string) (dist, out string, err error) {
	t.Helper()
	dist = t.TempDir()
	cmd := exec.Command("bash", "release.sh", "v0.0.0-test.2")
	cmd.Env = append(append(os.Environ(), "DIST="+dist, "RELEASE_ARCHES=amd64"), env...)
	b, err := cmd.CombinedOutput()
	return dist, string(b), err
}

// verify is the check docs/operations.md prints.
func verify(dist, signers string) error {
	cmd := exec.Command("ssh-keygen", "-Y", "verify", "-f", signers, "-I", "kbgen-release", "-n", "kbgen-release", "-s", filepath.Join(dist, "SHA256SUMS.sig"))
	f, err := os.Open(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		return err
	}
	defer f.Close()
	cmd.Stdin = f
	_, err = cmd.CombinedOutput()
	return err
}

// TestReleaseSigned: with RELEASE_SIGNING_KEY the release signs
// SHA256SUMS (verifiable offline with ssh-keygen -Y verify), which lists
// the static kbgen-e2e and the provenance statement naming every file;
// a changed SHA256SUMS no longer verifies, and a key the allowed signers
// do not list fails the release with no .sig left behind.
func TestReleaseSigned(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release")
	}
	if _, err := exec.LookPath("ssh-keygen"); err != nil {
		t.Skip("SKIP: ssh-keygen (openssh-client) is not installed: release signing not tested")
	}
	keys := t.TempDir()
	key, signers := throwawayKey(t, keys, "release")
	dist, out, err := release(t, "RELEASE_SIGNING_KEY="+key, "ALLOWED_SIGNERS="+signers)
	if err != nil {
		t.Fatalf("release.sh: %v\n%s", err, out)
	}
	if err := verify(dist, signers); err != nil {
		t.Fatalf("ssh-keygen -Y verify of the release: %v", err)
	}
	sums, err := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	e2e := "kbgen-e2e-v0.0.0-test.2-linux-amd64"
	for _, name := range []string{e2e, e2e + ".cdx.json", "kbgen-v0.0.0-test.2.intoto.jsonl", "kbgen-v0.0.0-test.2-linux-amd64"} {
		if !strings.Contains(string(sums), "  "+name+"\n") {
			t.Errorf("SHA256SUMS does not list %s:\n%s", name, sums)
		}
	}
	if err := sandbox.CheckStatic(filepath.Join(dist, e2e)); err != nil {
		t.Errorf("kbgen-e2e: %v", err)
	}
	checkProvenance(t, dist, e2e)

	// One byte changed: the signature no longer holds.
	if err := os.WriteFile(filepath.Join(dist, "SHA256SUMS"), append(sums, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := verify(dist, signers); err == nil {
		t.Error("a changed SHA256SUMS still verifies")
	}

	other, _ := throwawayKey(t, keys, "other")
	dist, out, err = release(t, "RELEASE_SIGNING_KEY="+other, "ALLOWED_SIGNERS="+signers)
	if err == nil || !strings.Contains(out, "does not verify against "+signers) {
		t.Errorf("a key the allowed signers do not list: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dist, "SHA256SUMS.sig")); err == nil {
		t.Error("a signature that does not verify was left in dist")
	}
}

// checkProvenance: the statement is in-toto v1 with SLSA provenance,
// names the commit, and lists e2e by the hash SHA256SUMS has for it.
func checkProvenance(t *testing.T, dist, e2e string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dist, "kbgen-v0.0.0-test.2.intoto.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		Type          string `json:"_type"`
		PredicateType string `json:"predicateType"`
		Subject       []struct {
			Name   string
			Digest map[string]string
		}
		Predicate struct {
			BuildDefinition struct {
				ExternalParameters map[string]string
			}
			RunDetails struct{ Builder struct{ ID string } }
		}
	}
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	commit, _ := exec.Command("git", "rev-parse", "HEAD").Output()
	if st.Type != "https://in-toto.io/Statement/v1" || st.PredicateType != "https://slsa.dev/provenance/v1" ||
		st.Predicate.BuildDefinition.ExternalParameters["commit"] != strings.TrimSpace(string(commit)) || st.Predicate.RunDetails.Builder.ID == "" {
		t.Errorf("provenance: %s", data)
	}
	sums, _ := os.ReadFile(filepath.Join(dist, "SHA256SUMS"))
	found := false
	for _, s := range st.Subject {
		if s.Name == e2e {
			found = strings.Contains(string(sums), s.Digest["sha256"]+"  "+e2e+"\n")
		}
	}
	if !found {
		t.Errorf("provenance does not name %s by its SHA256SUMS hash: %s", e2e, data)
	}
}

// TestReleaseUnsigned: without a key the release still builds, says
// loudly that it is unsigned, and writes no SHA256SUMS.sig.
func TestReleaseUnsigned(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a release")
	}
	dist, out, err := release(t, "RELEASE_SIGNING_KEY=")
	if err != nil {
		t.Fatalf("release.sh without a key: %v\n%s", err, out)
	}
	if !strings.Contains(out, "UNSIGNED RELEASE: RELEASE_SIGNING_KEY is not set") {
		t.Errorf("no loud warning:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dist, "SHA256SUMS.sig")); err == nil {
		t.Error("an unsigned release wrote SHA256SUMS.sig")
	}
	if _, err := os.Stat(filepath.Join(dist, "SHA256SUMS")); err != nil {
		t.Errorf("no SHA256SUMS: %v", err)
	}
}
