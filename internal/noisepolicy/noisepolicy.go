// Package noisepolicy is a vendor's noise policy: the registry's `noise:`
// block and its contract.EnvNoisePolicy form, which the step carries to
// the sandbox and the runner. Apart from package noise (the record, its
// samplers and verdict) so that the registry, and the service that reads
// it, link the policy's few lines and not the noise record.
package noisepolicy

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// Default thresholds, used where the registry sets none.
const (
	DefaultMaxStealPercent   = 5.0
	DefaultMaxForeignPercent = 1.0
)

// Policy is a vendor's noise policy (the registry's `noise:` block).
type Policy struct {
	// MaxStealPercent is the hypervisor steal on the run's CPUs above
	// which the run is noisy. 0 means the default (5).
	MaxStealPercent float64 `yaml:"max_steal_percent,omitempty" json:"max_steal_percent"`
	// MaxForeignPercent is the CPU time foreign processes could have
	// taken from the run's CPUs, in percent of the run's CPU capacity,
	// above which the run is noisy. 0 means the default (1).
	MaxForeignPercent float64 `yaml:"max_foreign_percent,omitempty" json:"max_foreign_percent"`
	// Retry makes a leaderboard or private run disturbed by external
	// noise exit 75 once, so Buildkite runs it again on another agent.
	Retry bool `yaml:"retry,omitempty" json:"retry"`
}

// WithDefaults fills unset thresholds.
func (p Policy) WithDefaults() Policy {
	if p.MaxStealPercent <= 0 {
		p.MaxStealPercent = DefaultMaxStealPercent
	}
	if p.MaxForeignPercent <= 0 {
		p.MaxForeignPercent = DefaultMaxForeignPercent
	}
	return p
}

// Error is a noise policy that cannot be used. Key is the setting at
// fault (max_steal_percent, an unknown key), the whole item when it is
// not key=value; its text names it for the registry's author.
type Error struct {
	Key string
	err error
}

func (e *Error) Error() string { return e.err.Error() }
func (e *Error) Unwrap() error { return errors.Unwrap(e.err) }

// errorf is an *Error of key; a %w in format is what it wraps.
func errorf(key, format string, args ...any) error {
	return &Error{Key: key, err: fmt.Errorf(format, args...)}
}

// Validate rejects thresholds outside 0..100.
func (p Policy) Validate() error {
	for name, v := range map[string]float64{"max_steal_percent": p.MaxStealPercent, "max_foreign_percent": p.MaxForeignPercent} {
		if v < 0 || v > 100 {
			return errorf(name, "noise.%s %g must be between 0 and 100", name, v)
		}
	}
	return nil
}

// String is the contract.EnvNoisePolicy form: "max_steal_percent=5,max_foreign_percent=1,retry=true".
func (p Policy) String() string {
	p = p.WithDefaults()
	return "max_steal_percent=" + fmtFloat(p.MaxStealPercent) +
		",max_foreign_percent=" + fmtFloat(p.MaxForeignPercent) +
		",retry=" + strconv.FormatBool(p.Retry)
}

// Parse reads the contract.EnvNoisePolicy form; "" is the default policy.
func Parse(s string) (Policy, error) {
	var p Policy
	for item := range strings.SplitSeq(strings.TrimSpace(s), ",") {
		if item == "" {
			continue
		}
		k, v, ok := strings.Cut(item, "=")
		if !ok {
			return p, errorf(item, "%s: %q is not key=value", contract.EnvNoisePolicy, item)
		}
		var err error
		switch k {
		case "max_steal_percent":
			p.MaxStealPercent, err = strconv.ParseFloat(v, 64)
		case "max_foreign_percent":
			p.MaxForeignPercent, err = strconv.ParseFloat(v, 64)
		case "retry":
			p.Retry, err = strconv.ParseBool(v)
		default:
			return p, errorf(k, "%s: unknown key %q", contract.EnvNoisePolicy, k)
		}
		if err != nil {
			return p, errorf(k, "%s: %s: %w", contract.EnvNoisePolicy, k, err)
		}
	}
	if err := p.Validate(); err != nil {
		return p, err
	}
	return p.WithDefaults(), nil
}

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }
