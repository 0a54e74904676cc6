package sandbox

import (
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// OnPlacement is a container started on an agent's placement outside any
// job: kbgen doctor's isolation probe and kbgen node qualify's calibration
// and load. Both must get exactly what a one-GPU step of the agent gets,
// so both are planned here, by the sandbox's own Plan.
type OnPlacement struct {
	// Placement is the agent's placement env, as its environment hook
	// exports it (node.Agent.EnvLookup).
	Placement contract.Lookup
	Image     string
	Runtime   contract.Runtime
	Host      dockerargv.Host
	// Name is the container's name; Command runs in it.
	Name    string
	Command []string
	// RunnerBinary is the host's static kbgen, mounted as ContainerRunner.
	RunnerBinary string
	// NoGPU leaves the GPU out (a host without the container toolkit).
	NoGPU bool
}

// Plan is the `docker run` of o: a one-GPU step's argv on the agent's
// placement, with no job env. A placement the sandbox would refuse for a
// step is refused here too.
func (o OnPlacement) DockerRun() (*dockerargv.Spec, error) {
	pl, err := dockerargv.PlacementFromEnv(o.Placement)
	if err != nil {
		return nil, err
	}
	return dockerargv.DockerRun(plugincfg.GPUDocker{Image: o.Image, Runtime: o.Runtime, GPUs: 1}, pl, o.Host, dockerargv.Options{
		Name:         o.Name,
		Command:      o.Command,
		RunnerBinary: o.RunnerBinary,
		NoGPU:        o.NoGPU,
		Env:          dockerargv.ContainerEnv(contract.MapLookup(nil)),
	})
}
