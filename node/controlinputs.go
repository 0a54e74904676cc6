package node

import (
	"errors"
	"os"
	"path/filepath"

	"github.com/gpu-mode/kbgen/signing"
)

// ControlInputs are where `kbgen node install --control` takes the agent
// token, the signing key and the vendor registry from.
type ControlInputs struct {
	// TokenFile holds the agent token; when "", EnvToken is the token.
	TokenFile string
	EnvToken  string
	// SigningKey is the private JWKS from `kbgen keygen --private-out`;
	// when "", a key installed under Root is kept (re-running install
	// never drops it), and with none installed install is refused.
	SigningKey string
	// Vendors is a vendor registry file replacing the built-in one; when
	// "", a registry installed under Root is kept.
	Vendors string
	Root    string
}

// Load fills opts.Token, opts.SigningJWKS and opts.Vendors from in. The
// key file must be readable by its owner alone: a key that others on the
// operator's machine could read may already be copied, and install would
// only spread it further.
func (in ControlInputs) Load(opts *ControlOptions) error {
	var err error
	if opts.Token, err = loadToken(in.TokenFile, in.EnvToken); err != nil {
		return err
	}
	if opts.SigningJWKS, err = in.signingKey(); err != nil {
		return err
	}
	opts.Vendors, err = in.readOrInstalled("Vendors", in.Vendors, ControlVendorsFile, "vendor registry")
	return err
}

func (in ControlInputs) signingKey() ([]byte, error) {
	if in.SigningKey == "" {
		key, err := in.readOrInstalled("SigningKey", "", SigningKeyFile, "signing key")
		if err == nil && key == nil {
			err = inputErrorf("SigningKey", nil, "no signing key: pass --signing-key FILE (the private JWKS from kbgen keygen --private-out); control agents sign every eval step with it")
		}
		return key, err
	}
	st, err := os.Stat(in.SigningKey)
	if err != nil {
		return nil, inputErrorf("SigningKey", err, "signing key: %v", err)
	}
	if perm := st.Mode().Perm(); perm&0o077 != 0 {
		return nil, inputErrorf("SigningKey", nil, "signing key %s is readable by others (mode %04o): chmod 600 %s, and replace the key if others may have copied it (kbgen keygen)", in.SigningKey, perm, in.SigningKey)
	}
	key, err := os.ReadFile(in.SigningKey)
	if err != nil {
		return nil, inputErrorf("SigningKey", err, "signing key: %v", err)
	}
	if _, err := signing.ParsePrivateSet(key); err != nil {
		return nil, inputErrorf("SigningKey", err, "signing key %s: %v", in.SigningKey, err)
	}
	return key, nil
}

// readOrInstalled reads file, or when it is "" the copy installed at
// installed under Root (nil when there is none); input is the field that
// names file, for the InputError.
func (in ControlInputs) readOrInstalled(input, file, installed, what string) ([]byte, error) {
	if file != "" {
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, inputErrorf(input, err, "%s: %v", what, err)
		}
		return data, nil
	}
	data, err := os.ReadFile(filepath.Join(in.Root, installed))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, inputErrorf(input, err, "reading the installed %s: %v", what, err)
	}
	return data, nil
}
