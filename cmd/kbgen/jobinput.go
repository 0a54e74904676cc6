package main

import (
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/jobsource"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
)

// readJob reads the job of a build step: --payload-file, else
// KERNELBOT_PAYLOAD* in the environment (jobsource.FromBuild); an
// unreadable file exits 2.
func readJob(g *Globals, file string) (*payload.Input, error) {
	in, err := jobsource.FromBuild(file, g.Stdin, g.LookupEnv)
	if jobsource.IsUsage(err) {
		return nil, withCode(exitcode.Usage, err)
	}
	return in, err
}

// loadRegistry loads --vendors, else KBGEN_VENDORS, else the built-in one.
func loadRegistry(g *Globals, file string) (*pipelinegen.Registry, error) {
	if file == "" {
		file = g.Getenv(contract.EnvVendors)
	}
	reg, err := pipelinegen.LoadRegistry(file)
	if err != nil {
		return nil, withCode(exitcode.Usage, err)
	}
	return reg, nil
}

func joinNames(names []string) string { return strings.Join(names, ", ") }
