package node

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/cpulist"
)

// housekeepingServices are the host processes that must run on the
// housekeeping CPUs (Plan.HostCPUs) only, by their /proc comm.
var housekeepingServices = []string{"systemd", "dockerd", "containerd", "buildkite-agent", "sshd"}

// checkHousekeeping reads /proc under the doctor's root: every host
// service process (systemd, dockerd, containerd, the agents, sshd) must be
// allowed on the housekeeping CPUs only, which the drop-ins `kbgen node
// install` writes ensure once systemd has re-read them.
func (d *Doctor) checkHousekeeping(p *Plan) Check {
	const name = "housekeeping CPUs"
	host, err := cpulist.Parse(p.HostCPUs)
	if err != nil || len(host) == 0 {
		return fail(name, "the plan has no housekeeping CPUs (host_cpus %q)", p.HostCPUs)
	}
	entries, err := fs.ReadDir(d.Root, "proc")
	if errors.Is(err, fs.ErrNotExist) {
		// A staged --root (no /proc of its own): the processes are the
		// running machine's, checked by doctor on the node itself.
		return Check{Name: name, Skipped: true, Detail: "not checked: no proc/ under --root (host processes are checked on the node: kbgen doctor without --root)"}
	}
	if err != nil {
		return fail(name, "cannot list /proc: %v", err)
	}
	var seen int
	var offenders []string
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		comm, err := fs.ReadFile(d.Root, "proc/"+e.Name()+"/comm")
		if err != nil || !slices.Contains(housekeepingServices, strings.TrimSpace(string(comm))) {
			continue
		}
		allowed, err := cpulist.Allowed(d.Root, "proc/"+e.Name()) // <root>/proc/<pid>/status
		if err != nil {
			continue
		}
		seen++
		if slices.ContainsFunc(allowed, func(c int) bool { return !slices.Contains(host, c) }) {
			offenders = append(offenders, fmt.Sprintf("%s[%s] on %s", strings.TrimSpace(string(comm)), e.Name(), allowed))
		}
	}
	switch {
	case seen == 0:
		return fail(name, "no host service (%s) visible in /proc", strings.Join(housekeepingServices, ", "))
	case len(offenders) > 0:
		return fail(name, "%d of %d host processes may run on the agents' CPUs (%s); want only %s: run kbgen node install, then %s",
			len(offenders), seen, strings.Join(first(offenders, 5), ", "), p.HostCPUs, p.HousekeepingNextStep())
	}
	return pass(name, "%d host processes (%s) confined to %s", seen, strings.Join(housekeepingServices, ", "), p.HostCPUs)
}

func first(s []string, n int) []string {
	if len(s) > n {
		return append(s[:n:n], fmt.Sprintf("and %d more", len(s)-n))
	}
	return s
}

// HousekeepingNextStep is what makes installed housekeeping drop-ins take
// effect: on cgroup v2 AllowedCPUs= in slice drop-ins, read on
// daemon-reload; on v1 CPUAffinity= in system.conf.d, read only when
// systemd itself starts (daemon-reexec). Running services keep their
// CPUs until restarted.
func (p *Plan) HousekeepingNextStep() string {
	reload := "systemctl daemon-reload"
	if p.CgroupVersion != 2 {
		reload = "systemctl daemon-reexec"
	}
	return reload + ", then restart docker, containerd and the agents"
}
