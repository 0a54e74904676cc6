package node

import (
	"errors"
	"fmt"

	"github.com/gpu-mode/kbgen/pipelinegen"
)

// QueueMismatchError is a queue this node's agents must not serve: its
// registry profile runs on Kubernetes, or on GPUs of another runtime. An
// AMD node on an NVIDIA queue would take jobs it can only fail.
type QueueMismatchError struct{ Msg string }

func (e *QueueMismatchError) Error() string { return e.Msg }

// CheckQueue checks p's queue against the vendor registry: a queue the
// registry does not know is allowed, with a note on the plan (the registry
// may be updated after the node); a Kubernetes queue or one of another
// runtime is a *QueueMismatchError. A plan with no queue passes.
func CheckQueue(p *Plan, reg *pipelinegen.Registry) error {
	if p.Queue == "" {
		return nil
	}
	v, err := reg.Lookup(p.Queue)
	if errors.As(err, new(*pipelinegen.UnknownQueueError)) {
		p.Notes = append(p.Notes, fmt.Sprintf("queue %q is not in the vendor registry; add it there before jobs are routed to it", p.Queue))
		return nil
	}
	if err != nil {
		return err
	}
	if v.Backend == pipelinegen.BackendKubernetes {
		return &QueueMismatchError{Msg: fmt.Sprintf("queue %q runs on Kubernetes (agent-stack-k8s), not on agents installed here: see deployment/k8s and docs/vendor-onboarding.md#kubernetes", p.Queue)}
	}
	if v.Runtime != p.Runtime {
		return &QueueMismatchError{Msg: fmt.Sprintf("queue %q runs %s GPUs (%s), but this node's GPUs are %s", p.Queue, v.Runtime, v.GPU, p.Runtime)}
	}
	return nil
}

// QueueImage is the runner image of p's queue in the registry, or "" when
// the plan names no queue or the registry does not know it: the image
// doctor's isolation probe runs unless one is given.
func QueueImage(p *Plan, reg *pipelinegen.Registry) string {
	if p == nil || p.Queue == "" {
		return ""
	}
	v, err := reg.Lookup(p.Queue)
	if err != nil {
		return ""
	}
	return v.Image
}
