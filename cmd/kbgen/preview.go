package main

import (
	"fmt"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/version"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
)

// PreviewCmd shows a vendor the pipeline a job would run on its queue.
type PreviewCmd struct {
	Queue    string `required:"" aliases:"vendor" help:"Queue (or alias) of the vendor, e.g. nvidia-h100 or mi300, as every other command names it (--vendor is the same flag). See 'kbgen vendors'." placeholder:"QUEUE"`
	JobFlags `embed:""`
	Vendors  string `help:"Vendor registry YAML replacing the built-in one. Default: KBGEN_VENDORS." placeholder:"FILE"`
	RunID    string `help:"Run id to show in the label." default:"preview"`
}

func (c *PreviewCmd) Help() string {
	return `Prints exactly the pipeline kbgen generate would upload for a job on a
vendor's queue: image, runtime, GPU count, CPUs, memory, shm, pids, network,
timeout, retry rules and priority. The job flags are those of kbgen local;
with none, the job is the built-in vectoradd example in test mode.
Examples (from the repository root):

  kbgen preview --queue nvidia-h100
  kbgen preview --queue amd-mi300 --mode leaderboard
  kbgen preview --queue h100 --task examples/identity --submission examples/identity/wrong.py
  kbgen encode --example identity --mode benchmark > job.b64
  kbgen preview --queue h100 --payload-file job.b64`
}

func (c *PreviewCmd) Run(g *Globals) error {
	reg, err := loadRegistry(g, c.Vendors)
	if err != nil {
		return err
	}
	vendor, err := reg.Lookup(c.Queue)
	if err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	in, err := c.load(g, jobsource.Options{DefaultExample: true, DefaultMode: payload.ModeTest})
	if err != nil {
		return err
	}
	p, err := pipelinegen.Generate(pipelinegen.Job{Input: in, RunID: c.RunID, Queue: vendor.Queue}, vendor, pipelinegen.Options{GeneratorVersion: version.Version})
	if err != nil {
		return err
	}
	doc, err := pipelinegen.Marshal(p)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.Stdout, "# %s %s on queue %s (%s runtime, image %s)\n", vendor.Donor, vendor.ShapeName(), vendor.Queue, vendor.Runtime, vendor.Image)
	_, err = g.Stdout.Write(doc)
	return err
}
