package registry

import (
	"fmt"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/imageref"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/payload"
)

// queueName is at most 63 characters (validQueueName): a counted
// repetition here would compile to 62 nested states, the slowest part of
// generate's start-up.
var (
	queueName   = lazyre.New(`^[a-z0-9][a-z0-9._-]*$`)
	archPattern = lazyre.New(`^[0-9]{2,3}[a-z]?$`)
)

// validSize reads a size as the sandbox and the Kubernetes pod spec will
// (internal/size), so the registry takes exactly what they take.
func validSize(s string) bool {
	_, err := size.Parse(s)
	return err == nil
}

// canonicalSizes writes memory and shm-size in docker's shortest whole
// form (1.5g → 1536m, 64GiB → 64g): the form plugin.yml's schema states
// and every consumer of the registry and the plugin config sees. Called
// once validate has parsed them.
func (r *Resources) canonicalSizes() {
	for _, s := range []*string{&r.Memory, &r.ShmSize} {
		if b, err := size.Parse(*s); err == nil {
			*s = b.String()
		}
	}
}

func validQueueName(s string) bool { return len(s) <= 63 && queueName.MatchString(s) }

// FieldError is a vendor profile with a field the registry refuses. Its
// message is the operator's (the field, its value, what is wanted); Field
// says which one to a caller.
type FieldError struct {
	// Field is the key as vendors.yaml spells it: "runtime",
	// "resources.memory", "noise", "aliases".
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }
func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

func (v *Vendor) validate() error {
	if err := v.validateFields(); err != nil {
		return err
	}
	if v.Noise != nil {
		if err := v.Noise.Validate(); err != nil {
			return &FieldError{Field: "noise", Err: err}
		}
	}
	for _, m := range v.Modes {
		if !m.Valid() {
			return fieldErr("modes", "modes: %q is not a mode (want %s)", m, payload.ModeList())
		}
	}
	for _, a := range v.Aliases {
		if !validQueueName(a) {
			return fieldErr("aliases", "alias %q must be lower case letters, digits, '.', '_' or '-'", a)
		}
	}
	return nil
}

func (v *Vendor) validateFields() error {
	switch {
	case !validQueueName(v.Queue):
		return fieldErr("queue", "queue %q must be lower case letters, digits, '.', '_' or '-'", v.Queue)
	case v.GPU == "":
		return fieldErr("gpu", "gpu is missing")
	case v.Runtime != contract.RuntimeNVIDIA && v.Runtime != contract.RuntimeROCm:
		return fieldErr("runtime", "runtime %q is not %q or %q", v.Runtime, contract.RuntimeNVIDIA, contract.RuntimeROCm)
	case v.Arch != nil && !archPattern.MatchString(*v.Arch):
		return fieldErr("arch", "arch %q is not an SM arch like \"90a\"", *v.Arch)
	case v.Runtime == contract.RuntimeROCm && v.Arch != nil:
		return fieldErr("arch", "arch is an nvcc setting; leave it null for rocm")
	case imageErr(v.Image) != nil:
		return fieldErr("image", "image: %w", imageErr(v.Image))
	}
	return v.validateLimits()
}

func (v *Vendor) validateLimits() error {
	switch {
	case v.Resources.GPUs < 1:
		return fieldErr("resources.gpus", "resources.gpus %d must be at least 1", v.Resources.GPUs)
	case v.Resources.CPUs < 1:
		return fieldErr("resources.cpus", "resources.cpus %d must be at least 1", v.Resources.CPUs)
	case !validSize(v.Resources.Memory):
		return fieldErr("resources.memory", "resources.memory %q is not a size like 64g", v.Resources.Memory)
	case !validSize(v.Resources.ShmSize):
		return fieldErr("resources.shm-size", "resources.shm-size %q is not a size like 16g", v.Resources.ShmSize)
	case v.Resources.PidsLimit < 64:
		return fieldErr("resources.pids-limit", "resources.pids-limit %d is too low to run Python (at least 64)", v.Resources.PidsLimit)
	case v.Timeouts.StartupMinutes < 0:
		return fieldErr("timeouts.startup-minutes", "timeouts.startup-minutes must not be negative")
	case v.Timeouts.MaxMinutes < 1:
		return fieldErr("timeouts.max-minutes", "timeouts.max-minutes must be at least 1")
	case v.Backend != "" && v.Backend != BackendDocker && v.Backend != BackendKubernetes:
		return fieldErr("backend", "backend %q is not %q or %q", v.Backend, BackendDocker, BackendKubernetes)
	}
	return nil
}

// imageErr checks an image as the sandbox will (internal/imageref), so
// the generator never emits a step the sandbox refuses.
func imageErr(ref string) error {
	_, err := imageref.Parse(ref)
	return err
}
