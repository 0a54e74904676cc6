package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
)

// EncodeCmd turns a job (JSON config, task directory or example) into a
// payload.
type EncodeCmd struct {
	File     string `arg:"" optional:"" placeholder:"FILE" help:"JSON config (or payload) file, or - for stdin; the same as --payload-file. With no job named, stdin."`
	JobFlags `embed:""`
}

func (c *EncodeCmd) Run(g *Globals) error {
	flags := c.JobFlags
	if c.File != "" {
		if flags.PayloadFile != "" {
			return exitcode.With(exitcode.Usage, errors.New("give the job file once: as FILE or as --payload-file"))
		}
		flags.PayloadFile = c.File
	}
	if flags.Example == "" && flags.Task == "" && flags.PayloadFile == "" {
		flags.PayloadFile = "-"
	}
	in, err := flags.load(g, jobsource.Options{DefaultMode: payload.ModeTest})
	if err != nil {
		return err
	}
	fmt.Fprintln(g.Stdout, in.Encoded)
	return nil
}

// DecodeCmd turns a payload into indented JSON.
type DecodeCmd struct {
	Payload string `arg:"" optional:"" default:"-" help:"The encoded payload, @FILE to read it from a file, or - for stdin."`
}

func (c *DecodeCmd) Run(g *Globals) error {
	var data []byte
	var err error
	switch {
	case c.Payload == "-":
		data, err = readInput(g, "-")
	case strings.HasPrefix(c.Payload, "@"):
		data, err = readInput(g, c.Payload[1:])
	default:
		data = []byte(c.Payload)
	}
	if err != nil {
		return err
	}
	in, err := payload.ParseInput(data)
	if err != nil {
		return err
	}
	out, err := json.MarshalIndent(in.Config, "", "  ")
	if err != nil {
		return err
	}
	fmt.Fprintln(g.Stdout, string(out))
	return nil
}

// readInput reads a job file, or stdin for "-", with jobsource's size
// bound; an unreadable file exits 2 (its error carries the code).
func readInput(g *Globals, name string) ([]byte, error) {
	return jobsource.ReadFile(name, g.Stdin)
}

func (c *EncodeCmd) Help() string {
	return `Validates a Kernelbot job and prints it as the payload Kernelbot sends:
base64(zlib(json)), the JSON written as Python's json.dumps writes it. The
job is a JSON config (FILE, --payload-file or stdin), a Kernelbot task
directory with a submission (--task, --submission, --mode; test by default),
or a built-in example (--example). Run from the repository root:

  kbgen encode --task examples/vectoradd --submission examples/vectoradd/submission.py --mode test > job.b64
  kbgen decode @job.b64 > job.json
  kbgen encode job.json > job.b64
  kbgen encode --example identity --submission wrong --mode benchmark

Exit codes: 0 ok, 2 unreadable file, 65 invalid job (one line says why).`
}

func (c *DecodeCmd) Help() string {
	return `Decodes and validates a payload and prints the job config as indented JSON.
Plain JSON is accepted too (handy to validate a config).

  kbgen decode "$KERNELBOT_PAYLOAD"            # in a Buildkite job
  kbgen encode --example identity > job.b64
  kbgen decode @job.b64
  kbgen decode - < job.b64

Exit codes: 0 ok, 2 unreadable file, 65 invalid job: not base64, not zlib,
not JSON, a schema violation or an unsafe file name (one line says which).`
}
