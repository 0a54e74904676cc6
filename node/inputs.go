package node

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/gpu-mode/kbgen"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/signing"
)

// Inputs are where `kbgen node install` takes the agent token, the
// verification key and the plugin from. Every field is optional.
type Inputs struct {
	// TokenFile holds the agent token; when "", EnvToken is the token.
	TokenFile string
	// EnvToken is $BUILDKITE_AGENT_TOKEN.
	EnvToken string
	// VerificationKey is a public JWKS file; when "", a key already
	// installed under Root is kept.
	VerificationKey string
	// Plugin is a directory holding the gpu-docker plugin to pin; when "",
	// the plugin built into this kbgen (kbgen.GPUDockerPlugin) is pinned.
	// The pin is never off: without it a build at another commit runs its
	// own hook code on the host (docs/security.md).
	Plugin string
	// Root is the install root (see Apply).
	Root string
}

// InputError is an input that cannot be used: an unreadable or empty
// token file, a verification key that is not a public key set, a plugin
// that is not a directory. The CLI exits 2 (exitcode.Usage).
type InputError struct {
	// Input is the Inputs or ControlInputs field that named it:
	// "TokenFile", "VerificationKey", "Plugin", "SigningKey", "Vendors".
	Input string
	Msg   string
	// Err is the cause where there is one (fs.ErrNotExist: no such file).
	Err error
}

func (e *InputError) Error() string { return e.Msg }
func (e *InputError) Unwrap() error { return e.Err }

// ExitCode makes an input error the caller's mistake (exitcode.Coder).
func (e *InputError) ExitCode() int { return exitcode.Usage }

func inputErrorf(input string, cause error, format string, args ...any) error {
	return &InputError{Input: input, Msg: fmt.Sprintf(format, args...), Err: cause}
}

// Load fills opts.Token, opts.VerificationJWKS and opts.Plugin from in.
// Two rules make re-running install safe: without a token, an installed
// token is kept (Render writes none); without a key, the installed key is
// kept, so re-running never quietly turns verification off (removing the
// installed key file, then re-running, does). Only a public key set may go
// onto a vendor node: a private key there would let the vendor sign steps
// for every queue.
func (in Inputs) Load(opts *InstallOptions) error {
	var err error
	if opts.Token, err = loadToken(in.TokenFile, in.EnvToken); err != nil {
		return err
	}
	opts.Plugin = kbgen.GPUDockerPlugin()
	if in.Plugin != "" {
		if st, err := os.Stat(in.Plugin); err != nil || !st.IsDir() {
			return inputErrorf("Plugin", err, "plugin %s: not a directory", in.Plugin)
		}
		opts.Plugin = os.DirFS(in.Plugin)
	}
	return in.loadKey(opts)
}

// loadToken is the agent token: the file's, else $BUILDKITE_AGENT_TOKEN's.
func loadToken(file, env string) (string, error) {
	if file == "" {
		return strings.TrimSpace(env), nil
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return "", inputErrorf("TokenFile", err, "agent token file: %v", err)
	}
	token := strings.TrimSpace(string(data))
	if token == "" {
		return "", inputErrorf("TokenFile", nil, "agent token file %s is empty", file)
	}
	return token, nil
}

func (in Inputs) loadKey(opts *InstallOptions) error {
	if in.VerificationKey == "" {
		key, err := os.ReadFile(filepath.Join(in.Root, JWKSFile))
		if err == nil {
			opts.VerificationJWKS = key
		} else if !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("reading the installed verification key: %w", err)
		}
		return nil
	}
	key, err := os.ReadFile(in.VerificationKey)
	if err != nil {
		return inputErrorf("VerificationKey", err, "verification key: %v", err)
	}
	if _, err := signing.ParsePublic(key); err != nil {
		return inputErrorf("VerificationKey", err, "verification key %s: %v", in.VerificationKey, err)
	}
	opts.VerificationJWKS = key
	return nil
}

// TokenMissing reports whether install has no agent token: none given and
// none installed under root. The agents will not start until one is.
func TokenMissing(root, token string) bool {
	if token != "" {
		return false
	}
	_, err := os.Stat(filepath.Join(root, TokenFile))
	return errors.Is(err, os.ErrNotExist)
}
