package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/signing"
)

// KeygenCmd writes a JWKS key pair for signing pipelines.
type KeygenCmd struct {
	Alg        string `help:"Signature algorithm: EdDSA (Ed25519, default), ES512 or PS512 — the ones buildkite-agent accepts for job signatures." default:"EdDSA" placeholder:"ALG"`
	KeyID      string `help:"Key id (kid) written into both files, e.g. kernelbot-2026-11. Name keys by date so a rotation is easy to follow. Default: a random kbgen-<hex>." placeholder:"ID"`
	PrivateOut string `help:"Where to write the private JWKS (mode 0600), e.g. signing.jwks; kbgen node install --control --signing-key installs it where the signer (the control agent running 'kbgen generate') reads it, and only there." required:"" placeholder:"FILE"`
	PublicOut  string `help:"Where to write the public JWKS, e.g. kernelbot-jwks.json: what vendor agents verify with ('kbgen node install --verification-key FILE')." required:"" placeholder:"FILE"`
	Force      bool   `help:"Overwrite existing files. Without it, keygen refuses to replace a key."`
}

func (c *KeygenCmd) Help() string {
	return `Writes a new key pair in the JSON Web Key Set format of
'buildkite-agent tool keygen', here in the current directory:

  kbgen keygen --key-id kernelbot-2026-11 --private-out signing.jwks --public-out verification.jwks

Then install the private key on the control agent, which signs every eval
step with it (it is copied to /etc/buildkite-agent/kbgen/control/signing-key.jwks,
0600; docs/buildkite-setup.md):

  sudo kbgen node install --control --signing-key signing.jwks --token-file /root/control-agent-token

and verify on every vendor agent (sudo kbgen node install --queue Q
--verification-key verification.jwks). Delete signing.jwks once installed. To
rotate, make a new pair, append its public key to the vendors' JWKS ("keys" is
a list), install the new private key on the control agent, and drop the old
public key once no build signed with it is left. docs/security.md explains
where each key lives and why.

Exit codes: 0 ok; 2 bad flags, a file that exists (use --force) or a path
that cannot be written (no such directory, permission denied).`
}

func (c *KeygenCmd) Run(g *Globals) error {
	if c.PrivateOut == c.PublicOut || filepath.Clean(c.PrivateOut) == filepath.Clean(c.PublicOut) {
		return exitcode.With(exitcode.Usage, errors.New("--private-out and --public-out name the same file"))
	}
	if !c.Force {
		for _, p := range []string{c.PrivateOut, c.PublicOut} {
			if _, err := os.Lstat(p); err == nil {
				return exitcode.Usagef("%s exists; pass --force to replace it (the old key will no longer sign)", p)
			}
		}
	}
	kp, err := signing.Generate(c.Alg, c.KeyID)
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if err := signing.WriteKeyFile(c.PrivateOut, kp.Private, 0o600, c.Force); err != nil {
		return pathError(err)
	}
	if err := signing.WriteKeyFile(c.PublicOut, kp.Public, 0o644, c.Force); err != nil {
		return pathError(err)
	}
	fmt.Fprintf(g.Stderr, "kbgen: wrote %s key %q: private %s (mode 0600), public %s\n", kp.Alg, kp.KeyID, c.PrivateOut, c.PublicOut)
	return nil
}

// pathError is a write error's exit code: a path the flags named that
// exists, lies in no directory or may not be written is bad input (2);
// anything else stays unexpected.
func pathError(err error) error {
	if errors.Is(err, fs.ErrExist) || errors.Is(err, fs.ErrNotExist) || errors.Is(err, fs.ErrPermission) {
		return exitcode.With(exitcode.Usage, err)
	}
	return err
}
