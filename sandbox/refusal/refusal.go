// Package refusal holds the sandbox's two kinds of "no": a step this agent
// must not run (RefusedError, exit 75: another agent may) and a plugin
// config that cannot be read (ConfigError, exit 2: no agent can). Every
// part of the sandbox (the docker argv, the lease, the GPU health check,
// the process launcher) answers with these, and one exit-code mapping
// (the sandbox's entry points attach it; exitcode.Of reads it).
package refusal

import (
	"errors"
	"fmt"
)

// RefusedError is a step this agent must not run: its placement is missing
// or broken, or the step asks for more than the agent owns. The machine (or
// this agent's share of it) is at fault, not the job, so the CLI exits
// EX_TEMPFAIL and Buildkite retries the job on another agent.
type RefusedError struct{ Msg string }

func (e *RefusedError) Error() string { return "refused: " + e.Msg }

// Refusef is a RefusedError with a formatted message.
func Refusef(format string, args ...any) error {
	return &RefusedError{Msg: fmt.Sprintf(format, args...)}
}

// IsRefused reports whether err (or anything it wraps) is a RefusedError.
func IsRefused(err error) bool {
	var r *RefusedError
	return errors.As(err, &r)
}

// ConfigError is a gpu-docker plugin configuration that cannot be read (an
// unknown key, a size that is not a size, no image). Retrying elsewhere
// would fail the same way, so it is not a RefusedError.
type ConfigError struct {
	Key string
	Msg string
}

func (e *ConfigError) Error() string {
	if e.Key == "" {
		return "gpu-docker plugin config: " + e.Msg
	}
	return fmt.Sprintf("gpu-docker plugin config: %s: %s", e.Key, e.Msg)
}

// ConfigErrorf is a ConfigError of key with a formatted message.
func ConfigErrorf(key, format string, args ...any) error {
	return &ConfigError{Key: key, Msg: fmt.Sprintf(format, args...)}
}

// IsConfigError reports whether err (or anything it wraps) is a ConfigError.
func IsConfigError(err error) bool {
	var c *ConfigError
	return errors.As(err, &c)
}
