package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/signing"
)

// KeygenCmd writes a JWKS key pair for signing pipelines.
type KeygenCmd struct {
	Alg        string `help:"Signature algorithm: EdDSA (Ed25519, default), ES512 or PS512 — the ones buildkite-agent accepts for job signatures." default:"EdDSA" placeholder:"ALG"`
	KeyID      string `help:"Key id (kid) written into both files, e.g. kernelbot-2026-11. Name keys by date so a rotation is easy to follow. Default: a random kbgen-<hex>." placeholder:"ID"`
	PrivateOut string `help:"Where to write the private JWKS (mode 0600), e.g. /etc/kbgen/signing-key.json. Only the signer (the control agent running 'kbgen generate') may hold it." required:"" placeholder:"FILE"`
	PublicOut  string `help:"Where to write the public JWKS, e.g. kernelbot-jwks.json: what vendor agents verify with ('kbgen node install --verification-key FILE')." required:"" placeholder:"FILE"`
	Force      bool   `help:"Overwrite existing files. Without it, keygen refuses to replace a key."`
}

func (c *KeygenCmd) Help() string {
	return `Writes a new key pair in the JSON Web Key Set format of
'buildkite-agent tool keygen':

  kbgen keygen --key-id kernelbot-2026-11 \
    --private-out /etc/kbgen/signing-key.json --public-out kernelbot-jwks.json

Then sign on the control agent (KBGEN_SIGNING_KEY=/etc/kbgen/signing-key.json
kbgen generate --upload) and verify on every vendor agent (kbgen node install
--verification-key kernelbot-jwks.json). To rotate, make a new pair, append
its public key to the vendors' JWKS ("keys" is a list), switch the signer to
the new private key, and drop the old public key once no build signed with it
is left. docs/security.md explains where each key lives and why.

Exit codes: 0 ok, 2 bad flags, 1 files exist (use --force) or cannot be
written.`
}

func (c *KeygenCmd) Run(g *Globals) error {
	if c.PrivateOut == c.PublicOut || filepath.Clean(c.PrivateOut) == filepath.Clean(c.PublicOut) {
		return exitcode.With(exitcode.Usage, errors.New("--private-out and --public-out name the same file"))
	}
	if !c.Force {
		for _, p := range []string{c.PrivateOut, c.PublicOut} {
			if _, err := os.Lstat(p); err == nil {
				return fmt.Errorf("%s exists; pass --force to replace it (the old key will no longer sign)", p)
			}
		}
	}
	kp, err := signing.Generate(c.Alg, c.KeyID)
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if err := signing.WriteKeyFile(c.PrivateOut, kp.Private, 0o600, c.Force); err != nil {
		return err
	}
	if err := signing.WriteKeyFile(c.PublicOut, kp.Public, 0o644, c.Force); err != nil {
		return err
	}
	fmt.Fprintf(g.Stderr, "kbgen: wrote %s key %q: private %s (mode 0600), public %s\n", kp.Alg, kp.KeyID, c.PrivateOut, c.PublicOut)
	return nil
}
