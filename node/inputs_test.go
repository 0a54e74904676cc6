package node

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/signing"
)

func TestInputsLoad(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	kp, err := signing.Generate("EdDSA", "k")
	if err != nil {
		t.Fatal(err)
	}
	pub, priv := write("pub.jwks", string(kp.Public)), write("priv.jwks", string(kp.Private))
	installed := t.TempDir()
	if err := os.MkdirAll(filepath.Join(installed, ConfigDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(installed, JWKSFile), kp.Public, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		in       Inputs
		token    string
		key      bool
		inputErr string // part of the *InputError, "" for none
	}{
		{"env token", Inputs{EnvToken: " tok-env \n", Root: dir}, "tok-env", false, ""},
		{"file beats env", Inputs{TokenFile: write("tok", "tok-file\n"), EnvToken: "tok-env", Root: dir}, "tok-file", false, ""},
		{"empty token file", Inputs{TokenFile: write("empty", " \n"), Root: dir}, "", false, "is empty"},
		{"missing token file", Inputs{TokenFile: filepath.Join(dir, "none"), Root: dir}, "", false, "agent token file"},
		{"public key", Inputs{VerificationKey: pub, Root: dir}, "", true, ""},
		{"private key refused", Inputs{VerificationKey: priv, Root: dir}, "", false, "is a private key"},
		{"installed key kept", Inputs{Root: installed}, "", true, ""},
		{"plugin not a directory", Inputs{Plugin: pub, Root: dir}, "", false, "not a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opts InstallOptions
			err := tt.in.Load(&opts)
			if tt.inputErr != "" {
				if !errors.As(err, new(*InputError)) || !strings.Contains(err.Error(), tt.inputErr) {
					t.Fatalf("err %v, want an InputError with %q", err, tt.inputErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if opts.Token != tt.token || (opts.VerificationJWKS != nil) != tt.key {
				t.Errorf("token %q key %v; want %q %v", opts.Token, opts.VerificationJWKS != nil, tt.token, tt.key)
			}
		})
	}
	if !TokenMissing(dir, "") || TokenMissing(dir, "t") {
		t.Error("TokenMissing")
	}
}
