package dockerargv

import (
	"path"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// Placement is *where* this agent's steps run: the share of the node it
// owns, as its environment hook exports it (see the Env* constants).
type Placement struct {
	// GPUIndex is the driver index or indexes ("3", "0,1,2,3"),
	// informational.
	GPUIndex string
	// GPUUUIDs (NVIDIA) and RenderNodes (AMD) are the agent's GPUs: one,
	// or the set of a multi-GPU agent (the placement variables then hold
	// a comma-separated list).
	GPUUUIDs    []string
	RenderNodes []string
	CPUs        cpulist.Set
	Mems        cpulist.Set
	Memory      size.Bytes
	PidsMax     int        // 0: no agent cap
	ShmMax      size.Bytes // 0: the agent's memory
	// CgroupParent is docker's --cgroup-parent ("" : docker's default).
	CgroupParent string
}

// cgroupParent is a systemd slice name or a cgroupfs path: nothing a
// shell or docker's flag parser could read as something else.
var cgroupParent = lazyre.New(`^/?[A-Za-z0-9_.:][A-Za-z0-9_.:-]*(/[A-Za-z0-9_.:-]+)*$`)

// renderNode is the only device path accepted for an AMD GPU.
var renderNode = lazyre.New(`^/dev/dri/renderD[0-9]+$`)

// PlacementFromEnv reads the placement from the agent's environment. The
// CPU, NUMA and memory shares are required; which GPU variable is required
// depends on the runtime, so it is checked in DockerRun. A missing or malformed
// value is a refusal.RefusedError: this agent is misconfigured, another may not be.
func PlacementFromEnv(lookup contract.Lookup) (Placement, error) {
	get := func(k string) string {
		v, _ := lookup(k)
		return strings.TrimSpace(v)
	}
	var p Placement
	p.GPUIndex = get(contract.EnvGPUIndex)
	p.GPUUUIDs = splitList(get(contract.EnvGPUUUID))
	p.RenderNodes = splitList(get(contract.EnvGPURenderNode))

	for _, k := range []string{contract.EnvCPUSet, contract.EnvMems, contract.EnvMemory} {
		if get(k) == "" {
			return p, refusal.Refusef("this agent has no placement: %s is not set (the agent's environment hook, written by `kbgen node install`, exports it)", k)
		}
	}
	var err error
	if p.CPUs, err = parseCPUSet(get(contract.EnvCPUSet)); err != nil {
		return p, refusal.Refusef("%s: %v", contract.EnvCPUSet, err)
	}
	if p.Mems, err = parseCPUSet(get(contract.EnvMems)); err != nil {
		return p, refusal.Refusef("%s: %v", contract.EnvMems, err)
	}
	if p.Memory, err = size.Parse(get(contract.EnvMemory)); err != nil {
		return p, refusal.Refusef("%s: %v", contract.EnvMemory, err)
	}
	if v := get(contract.EnvPidsMax); v != "" {
		if p.PidsMax, err = strconv.Atoi(v); err != nil || p.PidsMax <= 0 {
			return p, refusal.Refusef("%s: %q is not a positive integer", contract.EnvPidsMax, v)
		}
	}
	if v := get(contract.EnvShmMax); v != "" {
		if p.ShmMax, err = size.Parse(v); err != nil {
			return p, refusal.Refusef("%s: %v", contract.EnvShmMax, err)
		}
	}
	if v := get(contract.EnvCgroupParent); v != "" {
		if !cgroupParent.MatchString(v) || strings.Contains(v, "..") {
			return p, refusal.Refusef("%s: %q is not a slice name or cgroup path", contract.EnvCgroupParent, v)
		}
		p.CgroupParent = v
	}
	for _, i := range splitList(p.GPUIndex) {
		if n, err := strconv.Atoi(i); err != nil || n < 0 {
			return p, refusal.Refusef("%s: %q is not a GPU index", contract.EnvGPUIndex, p.GPUIndex)
		}
	}
	return p, nil
}

// splitList splits a comma-separated placement value; nil when empty.
func splitList(v string) []string {
	if v == "" {
		return nil
	}
	parts := strings.Split(v, ",")
	for i := range parts {
		parts[i] = strings.TrimSpace(parts[i])
	}
	return parts
}

// GPUsFromEnv are the agent's GPUs as the lease and the check name
// them: NVIDIA UUIDs, or AMD render nodes by name (renderD128).
func GPUsFromEnv(lookup contract.Lookup) (string, []string) {
	if ids := splitList(lookupValue(lookup, contract.EnvGPUUUID)); len(ids) > 0 {
		return string(contract.RuntimeNVIDIA), ids
	}
	var ids []string
	for _, n := range splitList(lookupValue(lookup, contract.EnvGPURenderNode)) {
		ids = append(ids, path.Base(n))
	}
	return string(contract.RuntimeROCm), ids
}

func lookupValue(lookup contract.Lookup, k string) string {
	v, _ := lookup(k)
	return v
}
