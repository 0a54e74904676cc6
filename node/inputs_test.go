package node

import (
	"errors"
	"io/fs"
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
	// text is checked only where the message is the contract: it tells
	// the operator what is wrong with the file they named.
	for _, tt := range []struct {
		name  string
		in    Inputs
		token string
		key   bool
		input string // the *InputError's Input, "" for none
		cause error  // what it wraps, where there is a kind
		text  string
	}{
		{"env token", Inputs{EnvToken: " tok-env \n", Root: dir}, "tok-env", false, "", nil, ""},
		{"file beats env", Inputs{TokenFile: write("tok", "tok-file\n"), EnvToken: "tok-env", Root: dir}, "tok-file", false, "", nil, ""},
		{"empty token file", Inputs{TokenFile: write("empty", " \n"), Root: dir}, "", false, "TokenFile", nil, "is empty"},
		{"missing token file", Inputs{TokenFile: filepath.Join(dir, "none"), Root: dir}, "", false, "TokenFile", fs.ErrNotExist, ""},
		{"public key", Inputs{VerificationKey: pub, Root: dir}, "", true, "", nil, ""},
		{"private key refused", Inputs{VerificationKey: priv, Root: dir}, "", false, "VerificationKey", nil, "is a private key; hand out only the file from `kbgen keygen --public-out`"},
		{"installed key kept", Inputs{Root: installed}, "", true, "", nil, ""},
		{"plugin not a directory", Inputs{Plugin: pub, Root: dir}, "", false, "Plugin", nil, ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var opts InstallOptions
			err := tt.in.Load(&opts)
			if tt.input != "" {
				if !isInput(err, tt.input) || tt.cause != nil && !errors.Is(err, tt.cause) || !strings.Contains(err.Error(), tt.text) {
					t.Fatalf("err %v, want an InputError for %s (cause %v) saying %q", err, tt.input, tt.cause, tt.text)
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

// isInput reports whether err is an *InputError for input.
func isInput(err error, input string) bool {
	ie, ok := errors.AsType[*InputError](err)
	return ok && ie.Input == input
}
