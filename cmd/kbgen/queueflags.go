package main

import (
	"errors"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/registry"
)

// QueueCheck is how every command that sends a queue name to Buildkite
// (submit, queues) checks it against the vendor registry: an alias is
// resolved to its queue, and a name the registry does not know is refused
// (2) unless --allow-unknown-queue. Without the check `kbgen queues h100`
// asked Buildkite for agents tagged queue=h100 and answered 0 agents, exit 0.
type QueueCheck struct {
	Vendors           string `help:"Vendor registry YAML replacing the built-in one, to check the queue against. Default: KBGEN_VENDORS." placeholder:"FILE"`
	AllowUnknownQueue bool   `name:"allow-unknown-queue" help:"Send a queue the vendor registry does not list as it is (an operator's test queue) instead of refusing it (exit 2)."`
}

// resolve is queue's canonical name ("" stays ""), or why it is refused.
func (c *QueueCheck) resolve(g *Globals, queue string) (string, error) {
	if queue == "" {
		return "", nil
	}
	reg, err := loadRegistry(g, c.Vendors)
	if err != nil {
		return "", err
	}
	v, err := reg.Lookup(queue)
	if _, unknown := errors.AsType[*registry.UnknownQueueError](err); unknown && c.AllowUnknownQueue {
		return queue, nil
	}
	if err != nil {
		return "", exitcode.Usagef("%v; --allow-unknown-queue sends it anyway", err)
	}
	return v.Queue, nil
}
