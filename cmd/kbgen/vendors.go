package main

import (
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/gpu-mode/kbgen/registry"
)

// VendorsCmd prints the vendor registry as a table.
type VendorsCmd struct {
	Vendors string `help:"Vendor registry YAML replacing the built-in one. Default: KBGEN_VENDORS." placeholder:"FILE"`
}

func (c *VendorsCmd) Run(g *Globals) error {
	reg, err := loadRegistry(g, c.Vendors)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(g.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUEUE\tALIASES\tDONOR\tGPU\tRUNTIME\tARCH\tBACKEND\tMODES\tCPUS\tMEMORY\tIMAGE")
	for _, v := range reg.Vendors {
		arch := v.ArchString()
		if arch == "" {
			arch = "-"
		}
		aliases := strings.Join(v.Aliases, ",")
		if aliases == "" {
			aliases = "-"
		}
		backend := v.Backend
		if backend == "" {
			backend = registry.BackendDocker
		}
		modes := "all"
		if len(v.Modes) > 0 {
			modes = fmt.Sprint(v.Modes)
			modes = strings.ReplaceAll(strings.Trim(modes, "[]"), " ", ",")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.Queue, aliases, v.Donor, v.ShapeName(), v.Runtime, arch, backend, modes, v.Resources.CPUs, v.Resources.Memory, v.Image)
	}
	return tw.Flush()
}

func (c *VendorsCmd) Help() string {
	return `Lists every queue kbgen can generate a pipeline for, with its aliases, the
donor, the GPUs a step gets ("8×H100" on a multi-GPU queue, which takes
only multi_gpu jobs), the runtime (nvidia or rocm), the nvcc arch, the
backend (docker or kubernetes), the modes it runs (a MIG queue: test), the CPUs and memory one eval step gets, and the
runner image. The registry is built in; --vendors FILE or KBGEN_VENDORS
replaces it (format: docs/formats.md#vendor-registry).

  kbgen vendors
  KBGEN_VENDORS=my-vendors.yaml kbgen vendors`
}
