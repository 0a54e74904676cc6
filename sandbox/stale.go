package sandbox

import (
	"context"
	"os/exec"
	"slices"
	"strings"

	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// RemoveStale removes, before spec runs, the kbgen containers that must not
// outlive their job (removeStale); nothing for a process spec, which has
// no container, or where there is no docker CLI (Run refuses then). Job.Run
// calls it as soon as it holds the lease and before the clean-GPU check:
// a leftover container still holding a leased GPU would otherwise fail the
// check, and the removal that clears it would never run.
func (l *Launcher) RemoveStale(ctx context.Context, spec *dockerargv.Spec) {
	if spec.Process != nil {
		return
	}
	if docker, err := exec.LookPath(l.docker()); err == nil {
		l.removeStale(ctx, docker, spec)
	}
}

// removeStale removes the kbgen containers that must not
// outlive their job: one of spec's own name (a killed job's retry reuses
// it), and any holding one of spec's GPUs. The lease is taken by then,
// and it says no live job of this node holds those GPUs, so such a
// container was left by a sandbox that was SIGKILLed: a `docker run --rm`
// container outlives its client, and the submission in it may still be
// running on the GPU the lease just gave out. One `docker ps` when there
// is nothing to remove, as the removal by name alone cost before.
func (l *Launcher) removeStale(ctx context.Context, docker string, spec *dockerargv.Spec) {
	ps := exec.CommandContext(ctx, docker, "ps", "--all", "--no-trunc", "--format", `{{.Names}}	{{.Label "`+dockerargv.GPUsLabel+`"}}`)
	ps.Env = l.Env
	out, err := ps.Output()
	if err != nil {
		// docker run reports a name still taken; nothing else depends on it.
		return
	}
	for _, c := range staleContainers(string(out), spec) {
		if err := l.quiet(ctx, docker, "rm", "--force", c.name); err != nil {
			l.logf("kbgen sandbox: could not remove stale container %s (%s): %v", c.name, c.why, err)
			continue
		}
		l.logf("kbgen sandbox: removed stale container %s (%s)", c.name, c.why)
	}
}

// staleContainer is a container removeStale removes, and why.
type staleContainer struct{ name, why string }

// staleContainers picks from `docker ps` lines ("NAME\tGPUS") the kbgen
// containers that block spec: its own name, or a kbgen container labelled
// with one of its GPUs.
func staleContainers(ps string, spec *dockerargv.Spec) []staleContainer {
	var out []staleContainer
	for line := range strings.Lines(ps) {
		name, gpus, _ := strings.Cut(strings.TrimRight(line, "\r\n"), "\t")
		if name == spec.Name {
			out = append(out, staleContainer{name, "left by a killed job of the same id"})
			continue
		}
		if !strings.HasPrefix(name, "kbgen-") || gpus == "" {
			continue
		}
		for _, g := range strings.Split(gpus, ",") {
			if slices.Contains(spec.GPUs, g) {
				out = append(out, staleContainer{name, "left by a killed job on GPU " + g + ", which this job now leases"})
				break
			}
		}
	}
	return out
}
