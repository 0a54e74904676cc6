package pipelinegen

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
)

// Build is what the bootstrap step (kbgen generate) generates from: the
// job and its settings from the build env.
type Build struct {
	// PayloadFile holds the job ("-" reads Stdin); "" reads
	// KERNELBOT_PAYLOAD* through Lookup.
	PayloadFile string
	Stdin       io.Reader
	// Queue is the vendor's queue; "" takes KERNELBOT_QUEUE.
	Queue string
	// Lookup reads the build env (KERNELBOT_*).
	Lookup contract.Lookup
}

// NoQueueError: the build names no queue (the caller's mistake: exit 2).
type NoQueueError struct{ Known []string }

// ExitCode makes it exit 2 (exitcode.Coder).
func (e *NoQueueError) ExitCode() int { return exitcode.Usage }

func (e *NoQueueError) Error() string {
	return fmt.Sprintf("no queue: pass --queue or set %s (known: %s)", contract.EnvQueue, strings.Join(e.Known, ", "))
}

// FromBuild is the pipeline for a build: the eval step for the job and
// queue the build env names. The caller's mistakes (an unreadable payload
// file, no or an unknown queue) carry exitcode.Usage (exitcode.IsUsage). A build without a job (an ordinary push, no
// KERNELBOT_PAYLOAD and no PayloadFile) gets NoJobPipeline and noJob
// true, so it passes.
func FromBuild(reg *registry.Registry, b Build, opts Options) (p *pipeline.Pipeline, noJob bool, err error) {
	in, err := jobsource.FromBuild(b.PayloadFile, b.Stdin, b.Lookup)
	if err != nil {
		var je *payload.Error
		if errors.As(err, &je) && je.Kind == payload.KindNoPayload && b.PayloadFile == "" {
			return NoJobPipeline(), true, nil
		}
		return nil, false, err
	}
	getenv := func(k string) string { v, _ := b.Lookup(k); return v }
	queue := b.Queue
	if queue == "" {
		queue = getenv(contract.EnvQueue)
	}
	if queue == "" {
		return nil, false, &NoQueueError{Known: reg.Queues()}
	}
	vendor, err := reg.Lookup(queue)
	if _, unknown := errors.AsType[*registry.UnknownQueueError](err); unknown {
		return nil, false, exitcode.With(exitcode.Usage, err)
	}
	if err != nil {
		return nil, false, err
	}
	job := Job{
		Input:    in,
		RunID:    getenv(contract.EnvRunID),
		Queue:    queue,
		Image:    getenv(contract.EnvImage),
		Priority: getenv(contract.EnvPriority),
		User:     getenv(contract.EnvUser),
		Agent:    getenv(contract.EnvTargetAgent),
	}
	p, err = Generate(job, vendor, opts)
	return p, false, err
}
