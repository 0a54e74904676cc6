package sandbox

import "github.com/gpu-mode/kbgen/internal/contract"

// PlacementEnv lists every placement variable, in the order `kbgen node env`
// prints them.
var PlacementEnv = []string{
	contract.EnvGPUIndex, contract.EnvGPUUUID, contract.EnvGPURenderNode, contract.EnvCPUSet, contract.EnvMems, contract.EnvMemory, contract.EnvPidsMax, contract.EnvShmMax, contract.EnvCgroupParent,
}
