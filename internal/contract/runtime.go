package contract

// Runtime is the GPU software stack: the word the vendor registry, the
// gpu-docker plugin config and a node's plan all use.
type Runtime string

const (
	RuntimeNVIDIA Runtime = "nvidia"
	RuntimeROCm   Runtime = "rocm"
)
