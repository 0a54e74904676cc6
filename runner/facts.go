package runner

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/gpu-mode/kbgen/fleet/hostfacts"
	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/plugincfg"
)

// publishFacts sets the attempt's run facts (fleet/runfacts) as the
// build's meta-data beside the result, for kbgen serve's per-agent
// series. Gathered on the host (the hook's `kbgen run --publish`), never
// from the container. A failure costs the fleet's view of one run, not
// the result: the caller logs it.
func publishFacts(ctx context.Context, agent *bkagent.Agent, lookup contract.Lookup, rec *noise.Record) error {
	name, _ := os.Hostname()
	ref, _ := lookup(plugincfg.EnvPrefix + "IMAGE")
	pulled := hostfacts.ImagePulled(ctx, "", strings.TrimSpace(ref))
	f := hostfacts.Gather(hostfacts.Host{Lookup: lookup, Proc: os.DirFS("/proc"), Name: name, PowerLimits: powerLimits(ctx, lookup), ImagePulled: pulled}, rec)
	job, _ := lookup(contract.EnvJobID)
	if job == "" {
		return nil // not a Buildkite job: no build to set meta-data on
	}
	v, err := runfacts.Encode(job, f)
	if err != nil {
		return err
	}
	if err := agent.MetaDataSet(ctx, runfacts.Key(f.Attempt), []byte(v)); err != nil {
		return fmt.Errorf("setting meta-data %s: %w", runfacts.Key(f.Attempt), err)
	}
	return nil
}

// powerLimits asks nvidia-smi for the GPUs' power limits on an NVIDIA
// agent (its placement names GPU UUIDs); nil elsewhere, or when
// nvidia-smi does not answer within the probe's timeout (the facts then
// carry no power limit).
func powerLimits(ctx context.Context, lookup contract.Lookup) []byte {
	if v, _ := lookup(contract.EnvGPUUUID); v == "" {
		return nil
	}
	out, err := probeOutput(ctx, os.Environ(), append([]string{"nvidia-smi"}, nvsmi.PowerLimitArgs...)...)
	if err != nil {
		return nil
	}
	return out
}
