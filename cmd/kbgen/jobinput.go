package main

import (
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/registry"
)

// loadRegistry loads --vendors, else KBGEN_VENDORS, else the built-in one.
func loadRegistry(g *Globals, file string) (*registry.Registry, error) {
	if file == "" {
		file = g.Getenv(contract.EnvVendors)
	}
	reg, err := registry.Load(file)
	if err != nil {
		return nil, exitcode.With(exitcode.Usage, err)
	}
	return reg, nil
}
