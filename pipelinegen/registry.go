package pipelinegen

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/imageref"
	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/payload"
)

//go:embed vendors.yaml
var embeddedVendors []byte

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
	Noise *noise.Policy `yaml:"noise,omitempty"`
	// Modes are the modes a job may run in on this queue; absent: all.
	// A queue of MIG slices lists [test]: a slice's timings are not a
	// whole GPU's, so nothing ranked runs there.
	Modes []payload.Mode `yaml:"modes,omitempty"`

	// shapes are the registry's other queues of the same GPU (same
	// donor first), set by ParseRegistry: where a refused job belongs.
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

// Registry is the set of vendor profiles, by queue and alias.
type Registry struct {
	Vendors []*Vendor
	byName  map[string]*Vendor
}

type registryFile struct {
	Vendors []*Vendor `yaml:"vendors"`
}

// LoadRegistry reads the registry from path, or the embedded one when path
// is empty.
func LoadRegistry(path string) (*Registry, error) {
	data, source := embeddedVendors, "embedded vendors.yaml"
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("reading vendor registry: %w", err)
		}
		source = path
	}
	reg, err := ParseRegistry(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return reg, nil
}

// ParseRegistry parses and validates registry YAML. Unknown keys are
// errors: a typo in a resource name must not silently fall back to nothing.
func ParseRegistry(data []byte) (*Registry, error) {
	var f registryFile
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("parsing vendor registry: %w", err)
	}
	if len(f.Vendors) == 0 {
		return nil, errors.New("vendor registry lists no vendors")
	}
	reg := &Registry{Vendors: f.Vendors, byName: map[string]*Vendor{}}
	for i, v := range f.Vendors {
		if v == nil {
			return nil, fmt.Errorf("vendor #%d is empty", i+1)
		}
		if err := v.validate(); err != nil {
			return nil, fmt.Errorf("vendor %q: %w", v.Queue, err)
		}
		v.Resources.canonicalSizes()
		for _, name := range append([]string{v.Queue}, v.Aliases...) {
			if other, dup := reg.byName[name]; dup {
				return nil, fmt.Errorf("queue name %q is used by both %q and %q", name, other.Queue, v.Queue)
			}
			reg.byName[name] = v
		}
	}
	linkShapes(reg.Vendors)
	return reg, nil
}

// linkShapes gives each vendor its siblings: the other queues of the same
// GPU model and runtime on the same backend, the same donor's first.
func linkShapes(vs []*Vendor) {
	for _, v := range vs {
		v.shapes = nil
		for _, same := range []bool{true, false} {
			for _, o := range vs {
				if o != v && o.GPU == v.GPU && o.Runtime == v.Runtime && o.backend() == v.backend() && (o.Donor == v.Donor) == same {
					v.shapes = append(v.shapes, o)
				}
			}
		}
	}
}

// backend is Backend with the default filled in.
func (v *Vendor) backend() Backend {
	if v.Backend == "" {
		return BackendDocker
	}
	return v.Backend
}

// queueName is at most 63 characters (validQueueName): a counted
// repetition here would compile to 62 nested states, the slowest part of
// generate's start-up.
var (
	queueName   = lazyre.New(`^[a-z0-9][a-z0-9._-]*$`)
	archPattern = lazyre.New(`^[0-9]{2,3}[a-z]?$`)
)

// validSize reads a size as the sandbox and the Kubernetes pod spec will
// (internal/size), so the registry takes exactly what they take.
func validSize(s string) bool {
	_, err := size.Parse(s)
	return err == nil
}

// canonicalSizes writes memory and shm-size in docker's shortest whole
// form (1.5g → 1536m, 64GiB → 64g): the form plugin.yml's schema states
// and every consumer of the registry and the plugin config sees. Called
// once validate has parsed them.
func (r *Resources) canonicalSizes() {
	for _, s := range []*string{&r.Memory, &r.ShmSize} {
		if b, err := size.Parse(*s); err == nil {
			*s = b.String()
		}
	}
}

func validQueueName(s string) bool { return len(s) <= 63 && queueName.MatchString(s) }

func (v *Vendor) validate() error {
	switch {
	case !validQueueName(v.Queue):
		return fmt.Errorf("queue %q must be lower case letters, digits, '.', '_' or '-'", v.Queue)
	case v.GPU == "":
		return errors.New("gpu is missing")
	case v.Runtime != contract.RuntimeNVIDIA && v.Runtime != contract.RuntimeROCm:
		return fmt.Errorf("runtime %q is not %q or %q", v.Runtime, contract.RuntimeNVIDIA, contract.RuntimeROCm)
	case v.Arch != nil && !archPattern.MatchString(*v.Arch):
		return fmt.Errorf("arch %q is not an SM arch like \"90a\"", *v.Arch)
	case v.Runtime == contract.RuntimeROCm && v.Arch != nil:
		return errors.New("arch is an nvcc setting; leave it null for rocm")
	case imageErr(v.Image) != nil:
		return fmt.Errorf("image: %w", imageErr(v.Image))
	case v.Resources.GPUs < 1:
		return fmt.Errorf("resources.gpus %d must be at least 1", v.Resources.GPUs)
	case v.Resources.CPUs < 1:
		return fmt.Errorf("resources.cpus %d must be at least 1", v.Resources.CPUs)
	case !validSize(v.Resources.Memory):
		return fmt.Errorf("resources.memory %q is not a size like 64g", v.Resources.Memory)
	case !validSize(v.Resources.ShmSize):
		return fmt.Errorf("resources.shm-size %q is not a size like 16g", v.Resources.ShmSize)
	case v.Resources.PidsLimit < 64:
		return fmt.Errorf("resources.pids-limit %d is too low to run Python (at least 64)", v.Resources.PidsLimit)
	case v.Timeouts.StartupMinutes < 0:
		return errors.New("timeouts.startup-minutes must not be negative")
	case v.Timeouts.MaxMinutes < 1:
		return errors.New("timeouts.max-minutes must be at least 1")
	case v.Backend != "" && v.Backend != BackendDocker && v.Backend != BackendKubernetes:
		return fmt.Errorf("backend %q is not %q or %q", v.Backend, BackendDocker, BackendKubernetes)
	}
	if v.Noise != nil {
		if err := v.Noise.Validate(); err != nil {
			return err
		}
	}
	for _, m := range v.Modes {
		if !m.Valid() {
			return fmt.Errorf("modes: %q is not a mode (want %s)", m, payload.ModeList())
		}
	}
	for _, a := range v.Aliases {
		if !validQueueName(a) {
			return fmt.Errorf("alias %q must be lower case letters, digits, '.', '_' or '-'", a)
		}
	}
	return nil
}

// imageErr checks an image as the sandbox will (internal/imageref), so
// the generator never emits a step the sandbox refuses.
func imageErr(ref string) error {
	_, err := imageref.Parse(ref)
	return err
}

// UnknownQueueError is returned for a queue the registry does not list.
type UnknownQueueError struct {
	Queue string
	Known []string
}

func (e *UnknownQueueError) Error() string {
	return fmt.Sprintf("unknown queue %q (known: %s)", e.Queue, strings.Join(e.Known, ", "))
}

// Lookup finds a vendor by queue name or alias.
func (r *Registry) Lookup(queue string) (*Vendor, error) {
	if v, ok := r.byName[queue]; ok {
		return v, nil
	}
	return nil, &UnknownQueueError{Queue: queue, Known: r.Names()}
}

// LookupOrFirst is Lookup, except that "" picks the registry's first
// queue (`kbgen local` without --queue or KERNELBOT_QUEUE).
func (r *Registry) LookupOrFirst(queue string) (*Vendor, error) {
	if qs := r.Queues(); queue == "" && len(qs) > 0 {
		queue = qs[0]
	}
	return r.Lookup(queue)
}

// Names lists every queue name and alias, sorted.
func (r *Registry) Names() []string {
	names := make([]string, 0, len(r.byName))
	for n := range r.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Queues lists the canonical queue names in registry order.
func (r *Registry) Queues() []string {
	q := make([]string, len(r.Vendors))
	for i, v := range r.Vendors {
		q[i] = v.Queue
	}
	return q
}

// IsAlias reports whether name is an alias rather than a canonical queue.
func (r *Registry) IsAlias(name string) bool {
	v, ok := r.byName[name]
	return ok && slices.Contains(v.Aliases, name)
}
