package node

import (
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/internal/gpuid"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/registry"
)

// QueueMismatchError is a queue this node's agents must not serve: its
// registry profile runs on Kubernetes, or on GPUs of another runtime. An
// AMD node on an NVIDIA queue would take jobs it can only fail.
type QueueMismatchError struct{ Msg string }

func (e *QueueMismatchError) Error() string { return e.Msg }

// CheckQueue checks p's queue against the vendor registry: a queue the
// registry does not know is refused (a typo would install a whole node
// no job reaches), unless allowUnknown, when it is kept with a note (the
// registry may be updated after the node); a Kubernetes queue or one of another
// runtime is a *QueueMismatchError. An alias ("h100") becomes the
// canonical queue ("nvidia-h100"), with a note: steps target the canonical
// name (pipelinegen.EvalFor), so agents tagged with an alias would never
// get a job. A plan with no queue passes.
func CheckQueue(p *Plan, reg *registry.Registry, allowUnknown bool) error {
	if p.Queue == "" {
		return nil
	}
	if err := validQueue(p.Queue); err != nil {
		return err
	}
	v, err := reg.Lookup(p.Queue)
	if errors.As(err, new(*registry.UnknownQueueError)) && !allowUnknown {
		return fmt.Errorf("%w: agents on it would never get a job; check the spelling (kbgen vendors lists the queues), or pass --allow-unknown-queue to install before the registry lists it", err)
	}
	if errors.As(err, new(*registry.UnknownQueueError)) {
		p.Notes = append(p.Notes, fmt.Sprintf("queue %q is not in the vendor registry; add it there before jobs are routed to it", p.Queue))
		return nil
	}
	if err != nil {
		return err
	}
	if v.Queue != p.Queue {
		p.Notes = append(p.Notes, fmt.Sprintf("queue %q is an alias of %q, the name steps are routed to: the agents are tagged queue=%s", p.Queue, v.Queue, v.Queue))
		p.Queue = v.Queue
	}
	if v.Backend == registry.BackendKubernetes {
		return &QueueMismatchError{Msg: fmt.Sprintf("queue %q runs on Kubernetes (agent-stack-k8s), not on agents installed here: see deployment/k8s and docs/vendor-onboarding.md#kubernetes", p.Queue)}
	}
	if v.Runtime != p.Runtime {
		return &QueueMismatchError{Msg: fmt.Sprintf("queue %q runs %s GPUs (%s), but this node's GPUs are %s", p.Queue, v.Runtime, v.GPU, p.Runtime)}
	}
	if note := stepCPUsNote(p, v); note != "" {
		p.Notes = append(p.Notes, note)
	}
	return nil
}

// stepCPUsNote explains why a step uses fewer CPUs than its agent owns:
// the registry fixes a queue's step size so every node of the queue times
// the same shape, and the sandbox takes the first whole cores of the
// agent's cpuset (the sandbox's pickCPUs). A step asking for more than the
// agent owns is refused, so that is said too. Only the agents that serve
// the queue count: a MIG or shape agent (its own Queue) never takes its
// steps. "" when no agent serves it.
func stepCPUsNote(p *Plan, v *registry.Vendor) string {
	least, serving := 0, 0
	for _, a := range p.Agents {
		if a.Queue != "" && a.Queue != v.Queue {
			continue
		}
		if serving == 0 || a.CPUs < least {
			least = a.CPUs
		}
		serving++
	}
	cpus := v.Resources.CPUs
	switch {
	case serving == 0:
		return ""
	case cpus == 0:
		return fmt.Sprintf("a step of queue %s gets all of its agent's CPUs (the registry sets no resources.cpus)", v.Queue)
	case cpus > least:
		return fmt.Sprintf("a step of queue %s asks for %d CPUs but an agent here owns %d: the sandbox will refuse its steps (exit 75); lower --reserve-cores or ask for the queue's resources.cpus to change", v.Queue, cpus, least)
	}
	if cpus == least {
		return fmt.Sprintf("a step of queue %s uses all %d of its agent's CPUs (the registry's resources.cpus)", v.Queue, cpus)
	}
	return fmt.Sprintf("a step of queue %s uses %d of its agent's %d CPUs: the registry's resources.cpus, the same on every node of the queue so timings compare; the sandbox gives it the agent's first whole cores and the rest stay idle", v.Queue, cpus, least)
}

// QueueImage is the runner image of p's queue in the registry, or "" when
// the plan names no queue or the registry does not know it: the image
// doctor's isolation probe runs unless one is given.
func QueueImage(p *Plan, reg *registry.Registry) string {
	if p == nil || p.Queue == "" {
		return ""
	}
	v, err := reg.Lookup(p.Queue)
	if err != nil {
		return ""
	}
	return v.Image
}

// ResolveShapes turns the --shape queue names (or aliases) into shapes:
// each must be a multi-GPU docker queue of the registry (pipelinegen:
// resources.gpus > 1), so its agents take exactly the steps it sends.
func ResolveShapes(reg *registry.Registry, names []string) ([]Shape, error) {
	var shapes []Shape
	for _, n := range names {
		v, err := reg.Lookup(n)
		if err != nil {
			return nil, err
		}
		if !v.MultiGPU() || v.Backend == registry.BackendKubernetes {
			return nil, &QueueMismatchError{Msg: fmt.Sprintf("--shape %s: queue %q is not a multi-GPU queue of agents installed here (it gives each step %d GPU(s), backend %q); e.g. nvidia-h100x8", n, v.Queue, v.Resources.GPUs, v.Backend)}
		}
		shapes = append(shapes, Shape{Queue: v.Queue, GPUs: v.Resources.GPUs})
	}
	return shapes, nil
}

// CheckAgentQueues checks the queues of the plan's shape and MIG agents
// against the registry as CheckQueue checks the plan's: the runtime must
// be the node's; a MIG queue must not run ranked modes.
func CheckAgentQueues(p *Plan, reg *registry.Registry) error {
	for _, a := range p.Agents {
		if a.Queue == "" {
			continue
		}
		v, err := reg.Lookup(a.Queue)
		if err != nil {
			return err
		}
		if v.Runtime != p.Runtime {
			return &QueueMismatchError{Msg: fmt.Sprintf("queue %q runs %s GPUs, but this node's GPUs are %s", a.Queue, v.Runtime, p.Runtime)}
		}
		if gpuid.IsMIG(a.GPU.UUID) && (v.RunsMode(payload.ModeLeaderboard) || v.MultiGPU()) {
			return &QueueMismatchError{Msg: fmt.Sprintf("--mig-queue %s: queue %q runs ranked jobs or several GPUs; a MIG slice's queue runs test only (modes: [test])", a.Queue, v.Queue)}
		}
	}
	return nil
}
