package main

import (
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
)

// JobFlags name a job the same way in every command that takes one
// (local, submit, preview, encode); jobsource.Load decides what they mean.
type JobFlags struct {
	Example     string `placeholder:"NAME" help:"A built-in example task (see 'kbgen local --list'), e.g. --example identity."`
	PayloadFile string `name:"payload-file" short:"f" placeholder:"FILE" help:"The job in FILE: a Kernelbot payload (base64(zlib(json))) or a plain JSON config; - reads stdin."`
	Task        string `placeholder:"DIR" help:"A Kernelbot task directory (task.yml and its files), with --submission FILE, e.g. --task examples/vectoradd --submission examples/vectoradd/submission.py."`
	Submission  string `placeholder:"NAME|FILE" help:"With --task: the file that replaces @SUBMISSION@. With --example: one of its named submissions (wrong, crash, cheat-pipe, …) or a .py file."`
	Mode        string `placeholder:"MODE" help:"One of ${modes}. A payload keeps its own mode unless this is given."`
}

// load returns the job the flags name; a mistake in the flags exits 2, an
// invalid job 65 (both errors carry their code).
func (f *JobFlags) load(g *Globals, opts jobsource.Options) (*payload.Input, error) {
	opts.Stdin = g.Stdin
	return jobsource.Load(f.source(), opts)
}

func (f *JobFlags) source() jobsource.Source {
	return jobsource.Source{Example: f.Example, Submission: f.Submission, PayloadFile: f.PayloadFile, Task: f.Task, Mode: payload.Mode(f.Mode)}
}
