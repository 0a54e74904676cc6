package node

import (
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// EnvVar is one exported variable of an agent's placement.
type EnvVar struct {
	Name, Value string
}

// Env is the placement an agent's environment hook exports: the sandbox
// variables `kbgen sandbox` enforces, then the vendor visibility variables
// for tools that run on the host. The visibility variables are a courtesy,
// not isolation: the sandbox passes the device itself.
func (a *Agent) Env(rt contract.Runtime, cgroupVersion int) []EnvVar {
	if len(a.GPUs) > 0 {
		return a.multiEnv(rt, cgroupVersion)
	}
	env := []EnvVar{{contract.EnvGPUIndex, strconv.Itoa(a.GPU.Index)}}
	switch rt {
	case contract.RuntimeROCm:
		env = append(env, EnvVar{contract.EnvGPURenderNode, a.GPU.RenderNode})
	default:
		env = append(env, EnvVar{contract.EnvGPUUUID, a.GPU.UUID})
	}
	env = append(env,
		EnvVar{contract.EnvCPUSet, a.CPUSet},
		EnvVar{contract.EnvMems, a.Mems},
		EnvVar{contract.EnvMemory, a.Memory},
	)
	if cgroupVersion == 2 {
		env = append(env, EnvVar{contract.EnvCgroupParent, JobsSlice})
	}
	switch rt {
	case contract.RuntimeROCm:
		// ROCR takes the stable unique id when there is one; HIP indexes
		// into what ROCR left visible, so it is 0, not the host index.
		rocr := strconv.Itoa(a.GPU.Index)
		if a.GPU.UUID != "" {
			rocr = a.GPU.UUID
		}
		env = append(env, EnvVar{"ROCR_VISIBLE_DEVICES", rocr}, EnvVar{"HIP_VISIBLE_DEVICES", "0"})
	default:
		// UUIDs, not indexes: they name the same GPU on the host and inside
		// a container that sees only that GPU.
		env = append(env, EnvVar{"NVIDIA_VISIBLE_DEVICES", a.GPU.UUID}, EnvVar{"CUDA_VISIBLE_DEVICES", a.GPU.UUID})
	}
	return env
}

// multiEnv is Env for a multi-GPU agent: the GPU variables hold its set.
func (a *Agent) multiEnv(rt contract.Runtime, cgroupVersion int) []EnvVar {
	index, device, visible := a.setEnv(rt)
	name := contract.EnvGPUUUID
	if rt == contract.RuntimeROCm {
		name = contract.EnvGPURenderNode
	}
	env := []EnvVar{{contract.EnvGPUIndex, index}, {name, device}, {contract.EnvCPUSet, a.CPUSet}, {contract.EnvMems, a.Mems}, {contract.EnvMemory, a.Memory}}
	if cgroupVersion == 2 {
		env = append(env, EnvVar{contract.EnvCgroupParent, JobsSlice})
	}
	return append(env, visible...)
}

// Devices are the agent's GPUs as its placement names them (what
// contract.EnvGPUUUID or contract.EnvGPURenderNode holds, and so what a
// run's facts report): its install-time identity, tagged by node install
// (contract.GPUsTag).
func (a *Agent) Devices(rt contract.Runtime) []string {
	look := a.EnvLookup(rt, 0)
	v, ok := look(contract.EnvGPUUUID)
	if !ok {
		v, _ = look(contract.EnvGPURenderNode)
	}
	var out []string
	for _, id := range strings.Split(v, ",") {
		if id != "" {
			out = append(out, id)
		}
	}
	return out
}

// EnvLookup is Env as the job would see it, for code that reads a
// placement the way `kbgen sandbox` does (sandbox.PlacementFromEnv) without
// an environment hook in between: doctor's isolation probe, node qualify.
func (a *Agent) EnvLookup(rt contract.Runtime, cgroupVersion int) contract.Lookup {
	env := a.Env(rt, cgroupVersion)
	return func(name string) (string, bool) {
		for _, e := range env {
			if e.Name == name {
				return e.Value, true
			}
		}
		return "", false
	}
}
