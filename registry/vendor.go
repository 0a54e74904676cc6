package registry

import (
	"fmt"
	"slices"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"github.com/gpu-mode/kbgen/payload"
)

// Vendor is one queue's profile: what hardware it is, what image runs on
// it, and what one eval step may ask for.
type Vendor struct {
	Queue     string           `yaml:"queue"`
	Aliases   []string         `yaml:"aliases,omitempty"`
	Donor     string           `yaml:"donor"`
	GPU       string           `yaml:"gpu"`
	Runtime   contract.Runtime `yaml:"runtime"`
	Arch      *string          `yaml:"arch"`
	Image     string           `yaml:"image"`
	Resources Resources        `yaml:"resources"`
	Timeouts  Timeouts         `yaml:"timeouts"`
	// Backend is how the queue's agents run a step: "docker" (the default:
	// one agent per GPU, kbgen sandbox) or "kubernetes" (agent-stack-k8s).
	Backend Backend `yaml:"backend,omitempty"`
	// Noise is the queue's noise policy: the thresholds above which a
	// timed run is noisy, and whether external noise is retried once
	// (docs/formats.md#vendor-registry). Absent: the defaults, no retry.
	Noise *noisepolicy.Policy `yaml:"noise,omitempty"`
	// Modes are the modes a job may run in on this queue; absent: all.
	// A queue of MIG slices lists [test]: a slice's timings are not a
	// whole GPU's, so nothing ranked runs there.
	Modes []payload.Mode `yaml:"modes,omitempty"`

	// shapes are the registry's other queues of the same GPU (same
	// donor first), set by Parse: where a refused job belongs.
	shapes []*Vendor
}

// MultiGPU reports whether the queue's steps get more than one GPU: it
// takes only multi_gpu jobs (Kernelbot's MI300x8, L4x4).
func (v *Vendor) MultiGPU() bool { return v.Resources.GPUs > 1 }

// ShapeName is the GPU as a step gets it: "H100", or "8×H100" on a
// multi-GPU queue.
func (v *Vendor) ShapeName() string {
	if v.MultiGPU() {
		return fmt.Sprintf("%d×%s", v.Resources.GPUs, v.GPU)
	}
	return v.GPU
}

// RunsMode reports whether a job in mode m may run on this queue.
func (v *Vendor) RunsMode(m payload.Mode) bool {
	return len(v.Modes) == 0 || slices.Contains(v.Modes, m)
}

// PreferMode is m when the queue runs it, else the first mode it does:
// the mode a sample job (tests, preview) uses there.
func (v *Vendor) PreferMode(m payload.Mode) payload.Mode {
	if v.RunsMode(m) {
		return m
	}
	return v.Modes[0]
}

// ShapesFor lists the registry's queues of the same GPU whose steps get
// more than one GPU (multi) or exactly one (!multi) and that run mode m,
// those of the same donor first: where a job refused here belongs.
func (v *Vendor) ShapesFor(multi bool, m payload.Mode) []string {
	var out []string
	for _, o := range v.shapes {
		if o.MultiGPU() == multi && o.RunsMode(m) {
			out = append(out, o.Queue)
		}
	}
	return out
}

// Backend is the way a queue's agents run steps.
type Backend string

const (
	BackendDocker     Backend = "docker"
	BackendKubernetes Backend = "kubernetes"
)

// Resources are the default limits of one eval step on this queue.
type Resources struct {
	GPUs      int    `yaml:"gpus"`
	CPUs      int    `yaml:"cpus"`
	Memory    string `yaml:"memory"`
	ShmSize   string `yaml:"shm-size"`
	PidsLimit int    `yaml:"pids-limit"`
}

// Timeouts bound a step: StartupMinutes is added to the job's own budget
// for image start and runner set-up; MaxMinutes is the most a vendor lets
// one step hold its GPU.
type Timeouts struct {
	StartupMinutes int `yaml:"startup-minutes"`
	MaxMinutes     int `yaml:"max-minutes"`
}

// Emoji is the Buildkite emoji for the vendor's runtime.
func (v *Vendor) Emoji() string {
	if v.Runtime == contract.RuntimeROCm {
		return ":amd:"
	}
	return ":nvidia:"
}

// ArchString is the nvcc arch, or "" for -arch=native / AMD.
func (v *Vendor) ArchString() string {
	if v.Arch == nil {
		return ""
	}
	return *v.Arch
}

// backend is Backend with the default filled in.
func (v *Vendor) backend() Backend {
	if v.Backend == "" {
		return BackendDocker
	}
	return v.Backend
}
