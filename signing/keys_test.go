package signing

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGenerateEveryAlgorithm(t *testing.T) {
	t.Parallel()
	for _, alg := range Algorithms {
		t.Run(alg, func(t *testing.T) {
			t.Parallel()
			kp, err := Generate(alg, "")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(kp.KeyID, "kbgen-") {
				t.Errorf("default key id %q", kp.KeyID)
			}
			priv, err := ParsePrivate(kp.Private, kp.KeyID)
			if err != nil {
				t.Fatal(err)
			}
			if a, _ := priv.Algorithm(); a.String() != alg {
				t.Errorf("alg %s", a)
			}
			pub, err := ParsePublic(kp.Public)
			if err != nil {
				t.Fatal(err)
			}
			if ids := KeyIDs(pub); len(ids) != 1 || ids[0] != kp.KeyID {
				t.Errorf("ids %v", ids)
			}
			// The agent's file format: {"keys": [{"kid", "alg", "use": "sig", ...}]}
			var doc struct {
				Keys []map[string]any `json:"keys"`
			}
			if err := json.Unmarshal(kp.Public, &doc); err != nil || len(doc.Keys) != 1 {
				t.Fatalf("public JWKS %s: %v", kp.Public, err)
			}
			k := doc.Keys[0]
			if k["kid"] != kp.KeyID || k["alg"] != alg || k["use"] != "sig" {
				t.Errorf("public key fields %v", k)
			}
			for _, secret := range []string{"d", "p", "q", "dp", "dq", "qi"} {
				if _, ok := k[secret]; ok {
					t.Errorf("public JWKS carries private member %q", secret)
				}
			}
		})
	}
	if _, err := Generate("HS512", ""); err == nil {
		t.Error("symmetric algorithm accepted")
	}
	a, _ := Generate("", "")
	b, _ := Generate("", "")
	if a.KeyID == b.KeyID || string(a.Private) == string(b.Private) {
		t.Error("two generated keys are the same")
	}
}

func TestParsePrivateKeySelection(t *testing.T) {
	t.Parallel()
	one, _ := Generate("EdDSA", "one")
	two, _ := Generate("EdDSA", "two")
	var a, b struct {
		Keys []json.RawMessage `json:"keys"`
	}
	json.Unmarshal(one.Private, &a)
	json.Unmarshal(two.Private, &b)
	both, _ := json.Marshal(map[string]any{"keys": append(a.Keys, b.Keys...)})

	var ke *KeyChoiceError
	if _, err := ParsePrivate(both, ""); !errors.As(err, &ke) || ke.Want != "" || !slices.Equal(ke.Have, []string{"one", "two"}) {
		t.Errorf("two keys and no id: %v", err)
	}
	k, err := ParsePrivate(both, "two")
	if err != nil {
		t.Fatal(err)
	}
	if id, _ := k.KeyID(); id != "two" {
		t.Errorf("picked %q", id)
	}
	if _, err := ParsePrivate(both, "three"); !errors.As(err, &ke) || ke.Want != "three" {
		t.Errorf("unknown id: %v", err)
	}
	if _, err := ParsePrivate([]byte("not json"), ""); err == nil {
		t.Error("garbage accepted")
	}
	if _, err := ParsePublic([]byte(`{"keys":[]}`)); err == nil {
		t.Error("empty verification set accepted")
	}
}

func TestWriteKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "k.json")
	if err := WriteKeyFile(p, []byte("a"), 0o600, false); err != nil {
		t.Fatal(err)
	}
	if err := WriteKeyFile(p, []byte("b"), 0o600, false); err == nil {
		t.Fatal("overwrote without overwrite")
	}
	if got, _ := os.ReadFile(p); string(got) != "a" {
		t.Fatalf("content %q", got)
	}
	os.Chmod(p, 0o666)
	if err := WriteKeyFile(p, []byte("c"), 0o600, true); err != nil {
		t.Fatal(err)
	}
	st, _ := os.Stat(p)
	if got, _ := os.ReadFile(p); string(got) != "c" || st.Mode().Perm() != 0o600 {
		t.Fatalf("content %q mode %v", got, st.Mode().Perm())
	}
	// Nothing but the key is left behind.
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("stray files: %v", ents)
	}
	if err := WriteKeyFile(filepath.Join(dir, "missing", "k.json"), []byte("x"), 0o600, false); err == nil {
		t.Error("write into a missing directory succeeded")
	}
}
