package main

import (
	"fmt"
	"time"

	"github.com/gpu-mode/kbgen/fleet/canary"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/serve"
)

// canaryExample is the built-in example a canary runs, in benchmark mode,
// when --canary-payload names none.
const canaryExample = "calibrate"

// canaryFlags are kbgen serve's canary flags (docs/operations.md,
// "Canaries").
type canaryFlags struct {
	CanaryEvery       time.Duration `name:"canary-every" placeholder:"DURATION" help:"Run a calibration canary on each available agent this often (at least 10m; e.g. 6h), targeted at it at the lowest priority; 0 (the default) runs none. Example: --canary-every 6h"`
	CanaryPayload     string        `name:"canary-payload" placeholder:"FILE" help:"The canary job, a payload file (kbgen encode's output, or JSON); default: the built-in ${canary_example} example in benchmark mode."`
	CanaryQuarantine  bool          `name:"canary-quarantine" help:"Pause (quarantine) an agent whose canaries drift, for 24h, besides logging it; the token needs write_agents."`
	CanaryFloor       float64       `name:"canary-floor" default:"2" placeholder:"PERCENT" help:"The smallest change against an agent's baseline, in percent, that counts as drift."`
	CanaryOffsetFloor float64       `name:"canary-offset-floor" default:"5" placeholder:"PERCENT" help:"The smallest offset of an agent's canary median from the median of the agents of its hardware, in percent, that judges it off its peers (identical parts differ by a few percent)."`
}

// minCanaryEvery keeps canaries a small share of an agent's day.
const minCanaryEvery = 10 * time.Minute

// config is the service's canary configuration.
func (f canaryFlags) config() (serve.CanaryConfig, error) {
	if f.CanaryEvery == 0 {
		return serve.CanaryConfig{}, nil
	}
	if f.CanaryEvery < minCanaryEvery {
		return serve.CanaryConfig{}, exitcode.With(exitcode.Usage, fmt.Errorf("--canary-every %s: at least %s (0 runs none)", f.CanaryEvery, minCanaryEvery))
	}
	for _, fl := range []struct {
		name string
		pct  float64
	}{{"--canary-floor", f.CanaryFloor}, {"--canary-offset-floor", f.CanaryOffsetFloor}} {
		if fl.pct <= 0 || fl.pct >= 100 {
			return serve.CanaryConfig{}, exitcode.With(exitcode.Usage, fmt.Errorf("%s %g: a percent above 0 and below 100", fl.name, fl.pct))
		}
	}
	src := jobsource.Source{Example: canaryExample, Mode: payload.ModeBenchmark}
	if f.CanaryPayload != "" {
		src = jobsource.Source{PayloadFile: f.CanaryPayload}
	}
	in, err := jobsource.Load(src, jobsource.Options{})
	if err != nil {
		return serve.CanaryConfig{}, exitcode.With(exitcode.Usage, fmt.Errorf("--canary-payload: %w", err))
	}
	return serve.CanaryConfig{Every: f.CanaryEvery, Payload: in.Encoded, Quarantine: f.CanaryQuarantine,
		Options: canary.Options{Floor: f.CanaryFloor / 100, OffsetFloor: f.CanaryOffsetFloor / 100}}, nil
}
