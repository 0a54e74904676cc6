package signing

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"

	"github.com/lestrrat-go/jwx/v3/jwa"
	"github.com/lestrrat-go/jwx/v3/jwk"
	"github.com/lestrrat-go/jwx/v3/jws"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/plugincfg"
)

// StepClaim is exactly what the agent host acts on for one eval step, as
// `kbgen generate` planned it. Buildkite's own step signature covers the
// same ground, but buildkite-agent v3.52.1 refuses every signed step with
// a plugin (it decodes the job's step without its plugins; fixed in
// v3.53.0), so kbgen signs this claim itself (contract.EnvStepSignature) and
// `kbgen sandbox` checks it against what it is about to run.
//
// Every field is in a canonical form both sides compute the same way: the
// plugin config as the typed plugincfg.GPUDocker (so "4" and 4, or the
// flat BUILDKITE_PLUGIN_GPU_DOCKER_* vars and BUILDKITE_PLUGINS, agree),
// the command as its argv, the env as a map (JSON sorts its keys) and the
// payload by its SHA-256, not its bytes.
type StepClaim struct {
	// Command is the step's command as argv (the plugin splits it on
	// whitespace, no shell).
	Command []string `json:"command"`
	// Plugins are the names of the step's plugins, in order (the agent runs
	// every one of them on the host).
	Plugins []string `json:"plugins"`
	// Plugin is the gpu-docker plugin's config.
	Plugin plugincfg.GPUDocker `json:"plugin"`
	// Env is the step env kbgen set, as the agent will hand it to the job
	// (after the upload's interpolation), without the signature itself.
	Env map[string]string `json:"env"`
	// PayloadSHA256 is payload.Checksum of the job's encoded payload; ""
	// when the build carries none.
	PayloadSHA256 string `json:"payload_sha256"`
	// Queue is the queue the step is for (also in Env as KERNELBOT_QUEUE).
	Queue string `json:"queue"`
}

// StepSignatureError is a step kbgen sandbox must not run: its signature
// is missing, does not verify with the node's keys, or signs another step
// than the one about to run (a step changed after signing). A retry would
// get the same step, so the CLI exits 65 (exitcode.BadJob). Kind is which
// of those (ErrUnsigned, ErrBadSignature, ErrChanged), for errors.Is.
type StepSignatureError struct {
	Kind error
	Msg  string
}

func (e *StepSignatureError) Error() string {
	return "refusing the step: " + e.Msg
}

func (e *StepSignatureError) Unwrap() error { return e.Kind }

// The kinds of StepSignatureError: what the operator fixes differs (sign
// the pipeline; hand the node the current key; ask who altered the step).
var (
	// ErrUnsigned is a step with no signature on a node that verifies.
	ErrUnsigned = errors.New("step not signed")
	// ErrBadSignature is a signature this node's keys do not vouch for:
	// none to check with, another key's, or not over a step claim.
	ErrBadSignature = errors.New("step signature does not verify")
	// ErrChanged is a step that differs from the one that was signed.
	ErrChanged = errors.New("step changed after signing")
)

func stepSigErrorf(kind error, format string, args ...any) error {
	return &StepSignatureError{Kind: kind, Msg: fmt.Sprintf(format, args...)}
}

// SignStep signs claim with key (a private key from ParsePrivate) as a
// compact JWS whose protected header names the key id, so a node holding
// several keys during a rotation picks the right one.
func SignStep(claim StepClaim, key jwk.Key) (string, error) {
	if key == nil {
		return "", errors.New("signing step: no key")
	}
	body, err := json.Marshal(claim)
	if err != nil {
		return "", fmt.Errorf("signing step: %w", err)
	}
	alg, ok := key.Algorithm()
	if !ok {
		return "", errors.New("signing step: the key names no algorithm")
	}
	hdr := jws.NewHeaders()
	if kid, ok := key.KeyID(); ok {
		if err := hdr.Set(jws.KeyIDKey, kid); err != nil {
			return "", fmt.Errorf("signing step: %w", err)
		}
	}
	sa, ok := jwa.LookupSignatureAlgorithm(alg.String())
	if !ok {
		return "", fmt.Errorf("signing step: %q is not a signature algorithm", alg)
	}
	tok, err := jws.Sign(body, jws.WithKey(sa, key, jws.WithProtectedHeaders(hdr)))
	if err != nil {
		return "", fmt.Errorf("signing step: %w", err)
	}
	return string(tok), nil
}

// VerifyStep checks token (the step's contract.EnvStepSignature) with keys
// and that its claim is want, the step as the host is about to run it.
// The error is a *StepSignatureError naming the first field that differs.
func VerifyStep(token string, keys jwk.Set, want StepClaim) error {
	if token == "" {
		return stepSigErrorf(ErrUnsigned, "it carries no %s, and this node verifies steps (%s is set)", contract.EnvStepSignature, contract.EnvVerificationKey)
	}
	if keys == nil || keys.Len() == 0 {
		return stepSigErrorf(ErrBadSignature, "no verification keys")
	}
	body, err := jws.Verify([]byte(token), jws.WithKeySet(keys, jws.WithInferAlgorithmFromKey(true)))
	if err != nil {
		return stepSigErrorf(ErrBadSignature, "its %s does not verify with this node's keys (%v)", contract.EnvStepSignature, err)
	}
	var got StepClaim
	if err := json.Unmarshal(body, &got); err != nil {
		return stepSigErrorf(ErrBadSignature, "its signed claim is not a step claim: %v", err)
	}
	if field := firstDiff(got, want); field != "" {
		return stepSigErrorf(ErrChanged, "it was changed after signing: %s differs from what kbgen generate signed", field)
	}
	return nil
}

// firstDiff names the first field (or env variable) where the signed
// claim and the step to run differ; "" when they agree.
func firstDiff(signed, run StepClaim) string {
	switch {
	case !slices.Equal(signed.Command, run.Command):
		return fmt.Sprintf("the command (%q, signed %q)", run.Command, signed.Command)
	case !slices.Equal(signed.Plugins, run.Plugins):
		return fmt.Sprintf("the plugins (%q, signed %q)", run.Plugins, signed.Plugins)
	case signed.Plugin != run.Plugin:
		return pluginDiff(signed.Plugin, run.Plugin)
	case signed.Queue != run.Queue:
		return fmt.Sprintf("the queue (%q, signed %q)", run.Queue, signed.Queue)
	case signed.PayloadSHA256 != run.PayloadSHA256:
		return "the payload (its SHA-256)"
	}
	keys := make([]string, 0, len(signed.Env)+len(run.Env))
	for k := range signed.Env {
		keys = append(keys, k)
	}
	for k := range run.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range slices.Compact(keys) {
		s, sok := signed.Env[k]
		r, rok := run.Env[k]
		if s != r || sok != rok {
			return "the step env " + k
		}
	}
	return ""
}

// pluginDiff names the first gpu-docker config key that differs.
func pluginDiff(signed, run plugincfg.GPUDocker) string {
	sv, rv := reflect.ValueOf(signed), reflect.ValueOf(run)
	for i := range sv.NumField() {
		if sv.Field(i).Interface() != rv.Field(i).Interface() {
			name := sv.Type().Field(i).Tag.Get("json")
			return fmt.Sprintf("the gpu-docker plugin's %s (%v, signed %v)", name, rv.Field(i).Interface(), sv.Field(i).Interface())
		}
	}
	return "the gpu-docker plugin config"
}

// StepEnv are the eval step's env variables a StepClaim covers: every
// variable kbgen generate puts in the eval step (a pipelinegen test keeps
// the two in step) and every one the sandbox acts on or passes into the
// container (a sandbox test checks its allow-list against this). One list
// for both sides, so a variable a compromised backend adds to the step is
// seen as a difference, not ignored.
var StepEnv = []string{contract.EnvQueue, contract.EnvRunID, contract.EnvNoisePolicy}

// StepEnvOf picks the StepEnv variables that lookup has.
func StepEnvOf(lookup contract.Lookup) map[string]string {
	env := map[string]string{}
	for _, k := range StepEnv {
		if v, ok := lookup(k); ok {
			env[k] = v
		}
	}
	return env
}
