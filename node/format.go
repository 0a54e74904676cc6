package node

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/size"
)

// WriteTable prints the plan for a person: one row per agent, then what
// the host keeps and any notes.
func (p *Plan) WriteTable(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tGPU\tMODEL\tPCI BUS\tDEVICE\tNUMA\tCPUSET\tCPUS\tMEMORY")
	for _, a := range p.Agents {
		dev := a.GPU.UUID
		if p.Runtime == contract.RuntimeROCm {
			dev = a.GPU.RenderNode
		}
		gpu, numa, id := strconv.Itoa(a.GPU.Index), strconv.Itoa(a.NUMANode), a.ID
		if len(a.GPUs) > 0 {
			idx, _, _ := a.setEnv(p.Runtime)
			gpu, numa, dev = idx, a.Mems, a.Link
		}
		if a.Queue != "" {
			id += " (" + a.Queue + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n",
			id, gpu, a.GPU.Model, a.GPU.PCIBus, dev, numa, a.CPUSet, a.CPUs, a.Memory)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	queue := p.Queue
	if queue == "" {
		queue = "(none; --queue sets it)"
	}
	fmt.Fprintf(w, "\nruntime %s, queue %s, %d agents\n", p.Runtime, queue, len(p.Agents))
	fmt.Fprintf(w, "housekeeping: %d %s and %d GiB per NUMA node with GPUs; host CPUs %s (cgroup v%d)\n", p.ReserveCores, plural(p.ReserveCores, "core", "cores"), p.ReserveMemory/size.GiB, p.HostCPUs, p.CgroupVersion)
	for _, n := range p.Notes {
		fmt.Fprintf(w, "note: %s\n", n)
	}
	return nil
}

// WriteJSON prints the plan as indented JSON.
func (p *Plan) WriteJSON(w io.Writer) error {
	data, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s\n", data)
	return err
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
