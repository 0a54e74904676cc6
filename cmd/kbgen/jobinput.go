package main

import (
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/pipelinegen"
)

// readJob reads the job from --payload-file (payload or plain JSON), or
// from KERNELBOT_PAYLOAD* in the environment when no file is given.
func readJob(g *Globals, file string) (*payload.Input, error) {
	if file != "" {
		data, err := readInput(g, file)
		if err != nil {
			return nil, err
		}
		return payload.ParseInput(data)
	}
	encoded, err := payload.JoinEnv(g.LookupEnv)
	if err != nil {
		return nil, err
	}
	return payload.ParseInput([]byte(encoded))
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
