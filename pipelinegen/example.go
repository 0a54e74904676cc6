package pipelinegen

import (
	_ "embed"
	"slices"

	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
)

//go:embed example_job.json
var exampleJob []byte

// ExampleJob is a fixed small job (a stub Python vector add) in the given
// mode, for the generator's tests, benchmarks and fuzz seeds: the golden
// pipelines in golden/pipelines pin the timeouts it implies. It is not a
// user-facing example: those are the task directories under examples/,
// which `kbgen local` and `kbgen preview` run (jobsource).
func ExampleJob(mode payload.Mode) (*payload.Input, error) {
	in, err := payload.ParseInput(exampleJob)
	if err != nil {
		return nil, err
	}
	if mode == "" || mode == in.Config.Mode {
		return in, nil
	}
	return withMode(in, mode)
}

// ExampleJobFor is ExampleJob shaped for queue v: on a multi-GPU queue
// it is a multi_gpu job whose every case has world_size = the queue's
// GPUs, as Kernelbot's multi-GPU tasks do.
func ExampleJobFor(v *registry.Vendor, mode payload.Mode) (*payload.Input, error) {
	in, err := ExampleJob(mode)
	if err != nil || !v.MultiGPU() {
		return in, err
	}
	cfg := *in.Config
	cfg.MultiGPU = true
	ws := payload.IntScalar(int64(v.Resources.GPUs))
	withWorldSize := func(cases []payload.Case) []payload.Case {
		out := make([]payload.Case, len(cases))
		for i, c := range cases {
			out[i] = append(slices.Clone(c), payload.CaseField{Key: "world_size", Value: ws})
		}
		return out
	}
	cfg.Tests, cfg.Benchmarks = withWorldSize(cfg.Tests), withWorldSize(cfg.Benchmarks)
	enc, err := payload.EncodeConfig(&cfg)
	if err != nil {
		return nil, err
	}
	return &payload.Input{Config: &cfg, Encoded: enc}, nil
}

// withMode returns a copy of the job in another mode, re-encoded.
func withMode(in *payload.Input, mode payload.Mode) (*payload.Input, error) {
	cfg := *in.Config
	cfg.Mode = mode
	enc, err := payload.EncodeConfig(&cfg)
	if err != nil {
		return nil, err
	}
	return &payload.Input{Config: &cfg, Encoded: enc}, nil
}
