package registry

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
)

//go:embed vendors.yaml
var embeddedVendors []byte

// Registry is the set of vendor profiles, by queue and alias.
type Registry struct {
	Vendors []*Vendor
	byName  map[string]*Vendor
}

type registryFile struct {
	Vendors []*Vendor `yaml:"vendors"`
}

// Load reads the registry from path, or the embedded one when path
// is empty.
func Load(path string) (*Registry, error) {
	data, source := embeddedVendors, "embedded vendors.yaml"
	if path != "" {
		var err error
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("reading vendor registry: %w", err)
		}
		source = path
	}
	reg, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", source, err)
	}
	return reg, nil
}

// Parse parses and validates registry YAML. Unknown keys are
// errors: a typo in a resource name must not silently fall back to nothing.
func Parse(data []byte) (*Registry, error) {
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
				return nil, &DuplicateQueueError{Name: name, First: other.Queue, Second: v.Queue}
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

// DuplicateQueueError is a queue name (a queue or an alias) that two
// vendors claim: a step sent to it would land on either.
type DuplicateQueueError struct {
	Name          string
	First, Second string // the queues of the two vendors, in file order
}

func (e *DuplicateQueueError) Error() string {
	return fmt.Sprintf("queue name %q is used by both %q and %q", e.Name, e.First, e.Second)
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
