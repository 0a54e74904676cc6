package node

import (
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// TestHousekeepingConfinesTheHost: on cgroup v2 (h100x8's sysfs has
// cgroup.controllers) system.slice and user.slice get AllowedCPUs= the
// housekeeping CPUs, the jobs slice the agents' CPUs, and every hook sends
// containers there; on v1 (l40sx2) the service manager's CPUAffinity=
// does it and no cgroup parent is exported.
func TestHousekeepingConfinesTheHost(t *testing.T) {
	t.Parallel()
	byPath := func(files []File) map[string]string {
		m := map[string]string{}
		for _, f := range files {
			m[f.Path] = string(f.Data)
		}
		return m
	}
	v2 := byPath(renderFixture(t, "h100x8", "nvidia-h100", false))
	for _, slice := range []string{"system.slice", "user.slice"} {
		got, ok := v2["/etc/systemd/system/"+slice+".d/"+HousekeepingDropIn]
		if !ok || !strings.Contains(got, "[Slice]\nAllowedCPUs=0,53-56,109-112,165-168,221-223\n") {
			t.Errorf("v2 %s drop-in missing or wrong (present %v):\n%s", slice, ok, got)
		}
	}
	jobs := v2["/etc/systemd/system/"+JobsSlice]
	if !strings.Contains(jobs, "AllowedCPUs=1-52,57-108,113-164,169-220\n") {
		t.Errorf("jobs slice:\n%s", jobs)
	}
	if hook := v2["/etc/buildkite-agent/kbgen/gpu3/hooks/environment"]; !strings.Contains(hook, "export "+contract.EnvCgroupParent+"="+JobsSlice+"\n") {
		t.Errorf("v2 hook does not send containers to %s:\n%s", JobsSlice, hook)
	}
	if _, ok := v2[SystemConfDir+"/"+HousekeepingDropIn]; ok {
		t.Error("v2 node also got the v1 CPUAffinity= drop-in")
	}

	v1 := byPath(renderFixture(t, "l40sx2", "nvidia-l40s", false))
	if got := v1[SystemConfDir+"/"+HousekeepingDropIn]; !strings.Contains(got, "[Manager]\nCPUAffinity=0 7-8 15\n") {
		t.Errorf("v1 manager drop-in:\n%s", got)
	}
	for p := range v1 {
		if strings.Contains(p, ".slice.d/") || strings.HasSuffix(p, JobsSlice) {
			t.Errorf("v1 node got a v2 file %s", p)
		}
	}
	if hook := v1["/etc/buildkite-agent/kbgen/gpu0/hooks/environment"]; strings.Contains(hook, contract.EnvCgroupParent) {
		t.Errorf("v1 hook exports a cgroup parent:\n%s", hook)
	}
}
