package plugincfg

import (
	"path"
	"strings"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// Source is the local plugin in this repository that runs a
// step through `kbgen sandbox` (.buildkite/plugins/gpu-docker).
const Source = "./.buildkite/plugins/gpu-docker"

// GPUDocker is the `gpu-docker` plugin's configuration: *what* a step
// may use. The agent hands each key to the plugin's hooks as
// BUILDKITE_PLUGIN_GPU_DOCKER_<KEY> (upper case, '-' → '_'); `kbgen sandbox`
// reads it back and combines it with the node's placement (*where*).
// .buildkite/plugins/gpu-docker/plugin.yml is the JSON schema of this type,
// and a test keeps the two in step.
type GPUDocker struct {
	// Image is the runner image (registry reference, ideally by digest).
	Image string `json:"image" yaml:"image"`
	// Runtime is the GPU flavour: "nvidia" or "rocm".
	Runtime contract.Runtime `json:"runtime" yaml:"runtime"`
	// GPUs is how many GPUs the step asks for (the agent owns one).
	GPUs int `json:"gpus" yaml:"gpus"`
	// CPUs is how many CPUs of the agent's cpuset the step asks for.
	CPUs int `json:"cpus" yaml:"cpus"`
	// Memory is the container memory limit, docker syntax ("64g"); swap is
	// set equal, so there is none.
	Memory string `json:"memory" yaml:"memory"`
	// ShmSize is the /dev/shm size, docker syntax ("16g").
	ShmSize string `json:"shm-size" yaml:"shm-size"`
	// PidsLimit caps processes and threads in the container.
	PidsLimit int `json:"pids-limit" yaml:"pids-limit"`
	// Network is the docker network mode; "none" for evaluation.
	Network string `json:"network" yaml:"network"`
}

// EnvPrefix prefixes the env vars the agent sets from the config.
const EnvPrefix = "BUILDKITE_PLUGIN_GPU_DOCKER_"

// PluginName mirrors the agent's naming of a plugin: the last path element
// of its source without "#ref", ".git" or "-buildkite-plugin"
// (./.buildkite/plugins/gpu-docker → gpu-docker).
func PluginName(source string) string {
	source, _, _ = strings.Cut(source, "#")
	name := path.Base(strings.TrimRight(source, "/"))
	name = strings.TrimSuffix(name, ".git")
	return strings.TrimSuffix(name, "-buildkite-plugin")
}
