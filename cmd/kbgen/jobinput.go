package main

import (
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/pipelinegen"
)

// loadRegistry loads --vendors, else KBGEN_VENDORS, else the built-in one.
func loadRegistry(g *Globals, file string) (*pipelinegen.Registry, error) {
	if file == "" {
		file = g.Getenv(contract.EnvVendors)
	}
	reg, err := pipelinegen.LoadRegistry(file)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return reg, nil
}
