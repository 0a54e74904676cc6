package node

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/bkagent"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/cpulist"
	"github.com/gpu-mode/kbgen/sandbox"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// Check is one line of the doctor's report.
type Check struct {
	Name string
	// OK is false for a failure; Skipped checks were not run on request
	// and do not fail the report.
	OK      bool
	Skipped bool
	Detail  string
}

func pass(name, format string, args ...any) Check {
	return Check{Name: name, OK: true, Detail: fmt.Sprintf(format, args...)}
}

func fail(name, format string, args ...any) Check {
	return Check{Name: name, Detail: fmt.Sprintf(format, args...)}
}

// Doctor checks a vendor node: the vendor checklist, automated. Every way
// it touches the machine is a field, so tests describe a machine without
// having one.
type Doctor struct {
	// Root is the machine's file system ("/"): sys/fs/cgroup, dev/kfd,
	// dev/dri, the installed plan.
	Root fs.FS
	// Runner runs nvidia-smi, docker and systemctl.
	Runner Runner
	// Image runs the per-agent isolation probe; "" skips those checks.
	Image string
	// SkipContainers says the probes were skipped on request
	// (--skip-containers), which is then the reason reported.
	SkipContainers bool
	// RunnerBinary is the host's static kbgen, mounted as the sandbox
	// always does.
	RunnerBinary string
	// SandboxHost is what the sandbox's planner reads (device files, SMT).
	SandboxHost dockerargv.Host
	// NoGPU leaves the GPU flags out of the probe (tests on engines with
	// no GPU runtime); the probe then sees no GPU and fails that part.
	NoGPU bool
	// Kbgen is the kbgen the agents run, checked to be static; "" skips.
	Kbgen string
	// Plugin is the gpu-docker plugin the pin must hold; nil is the one
	// built into this kbgen.
	Plugin fs.FS
}

// Run performs every check and returns them in order. It never stops at
// the first failure: a vendor fixing a node wants the whole list.
func (d *Doctor) Run(ctx context.Context) []Check {
	if d.isControl() {
		return d.runControl(ctx)
	}
	var out []Check
	plan, planErr := d.installedPlan()
	if planErr != nil {
		out = append(out, fail("agents installed", "%v", planErr))
	} else {
		out = append(out, pass("agents installed", "%d agents for queue %s (%s)", len(plan.Agents), plan.Queue, PlanFile))
	}
	rt := contract.RuntimeNVIDIA
	if plan != nil {
		rt = plan.Runtime
	} else if _, err := fs.Stat(d.Root, "dev/kfd"); err == nil {
		rt = contract.RuntimeROCm
	}
	out = append(out, d.checkDriver(ctx, rt, plan))
	dockerOK := d.checkDocker(ctx, &out)
	out = append(out, d.checkGPURuntime(ctx, rt, plan))
	if rt == contract.RuntimeNVIDIA {
		out = append(out, d.checkProfiling())
	}
	out = append(out, d.checkKernelLog())
	out = append(out, d.checkCgroupV2(ctx, dockerOK))
	if plan == nil {
		out = append(out, fail("agent units", "not checked: no agents installed"))
		out = append(out, fail("isolation", "not checked: no agents installed"))
		return out
	}
	out = append(out, d.checkStatic(), d.checkPluginPin(plan), d.checkAgentVersion(ctx, UnitName))
	if rt == contract.RuntimeNVIDIA {
		out = append(out, d.checkNVML(plan))
	}
	for _, a := range plan.Agents {
		out = append(out, d.checkUnit(ctx, a.Unit()))
	}
	out = append(out, d.checkHousekeeping(plan))
	for i := range plan.Agents {
		out = append(out, d.checkIsolation(ctx, plan, &plan.Agents[i], dockerOK))
	}
	return out
}

func (d *Doctor) installedPlan() (*Plan, error) {
	data, err := fs.ReadFile(d.Root, strings.TrimPrefix(PlanFile, "/"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("no %s: run deployment/setup-node.sh (or kbgen node install)", PlanFile)
	}
	if err != nil {
		return nil, err
	}
	return ParsePlan(data)
}

func (d *Doctor) checkDriver(ctx context.Context, rt contract.Runtime, plan *Plan) Check {
	const name = "GPU driver"
	var gpus []GPU
	switch rt {
	case contract.RuntimeROCm:
		if _, err := fs.Stat(d.Root, "dev/kfd"); err != nil {
			return fail(name, "/dev/kfd missing: the amdgpu driver (ROCm) is not loaded")
		}
		sys, err := fs.Sub(d.Root, "sys")
		if err != nil {
			return fail(name, "%v", err)
		}
		if gpus, err = ReadAMDGPUs(sys, nil); err != nil {
			return fail(name, "%v", err)
		}
	default:
		out, err := d.Runner.Output(ctx, "nvidia-smi", NvidiaSMIArgs...)
		if err != nil {
			return fail(name, "nvidia-smi failed (is the NVIDIA driver installed and loaded?): %v", err)
		}
		if gpus, err = ParseNvidiaSMI(out); err != nil {
			return fail(name, "%v", err)
		}
	}
	detail := fmt.Sprintf("%d× %s", len(gpus), gpus[0].Model)
	if plan == nil {
		return pass(name, "%s", detail)
	}
	if len(gpus) != len(plan.Agents) {
		return fail(name, "%s, but %d agents are installed: re-run kbgen node install", detail, len(plan.Agents))
	}
	for _, a := range plan.Agents {
		found := slices.ContainsFunc(gpus, func(g GPU) bool {
			if rt == contract.RuntimeROCm {
				return g.RenderNode == a.GPU.RenderNode && g.PCIBus == a.GPU.PCIBus
			}
			return g.UUID == a.GPU.UUID
		})
		if !found {
			return fail(name, "%s, but %s's GPU (%s) is gone: re-run kbgen node install", detail, a.ID, a.GPU.PCIBus)
		}
	}
	return pass(name, "%s, one per installed agent", detail)
}

func (d *Doctor) checkDocker(ctx context.Context, out *[]Check) bool {
	v, err := d.Runner.Output(ctx, "docker", "version", "--format", "{{.Server.Version}}")
	if err != nil {
		*out = append(*out, fail("docker", "cannot reach the docker engine: %v", err))
		return false
	}
	*out = append(*out, pass("docker", "engine %s", strings.TrimSpace(string(v))))
	return true
}

func (d *Doctor) checkGPURuntime(ctx context.Context, rt contract.Runtime, plan *Plan) Check {
	if rt == contract.RuntimeROCm {
		const name = "ROCm devices"
		var missing []string
		nodes := []string{"/dev/kfd"}
		if plan != nil {
			for _, a := range plan.Agents {
				nodes = append(nodes, a.GPU.RenderNode)
			}
		}
		for _, n := range nodes {
			fi, err := fs.Stat(d.Root, strings.TrimPrefix(n, "/"))
			if err != nil || fi.Mode()&fs.ModeCharDevice == 0 {
				missing = append(missing, n)
			}
		}
		if len(missing) > 0 {
			return fail(name, "not character devices: %s", strings.Join(missing, " "))
		}
		return pass(name, "/dev/kfd and %d render nodes", len(nodes)-1)
	}
	const name = "NVIDIA container toolkit"
	for _, tool := range [][]string{{"nvidia-ctk", "--version"}, {"nvidia-container-cli", "--version"}} {
		if out, err := d.Runner.Output(ctx, tool[0], tool[1:]...); err == nil {
			return pass(name, "%s", firstLine(out))
		}
	}
	return fail(name, "neither nvidia-ctk nor nvidia-container-cli runs: install nvidia-container-toolkit, then `nvidia-ctk runtime configure --runtime=docker && systemctl restart docker`")
}

func (d *Doctor) checkCgroupV2(ctx context.Context, dockerOK bool) Check {
	const name = "cgroup v2"
	data, err := fs.ReadFile(d.Root, "sys/fs/cgroup/cgroup.controllers")
	if err != nil {
		return fail(name, "/sys/fs/cgroup is not cgroup v2 (no cgroup.controllers): boot with systemd.unified_cgroup_hierarchy=1")
	}
	ctrl := strings.Fields(string(data))
	var missing []string
	for _, c := range []string{"cpuset", "memory", "pids"} {
		if !slices.Contains(ctrl, c) {
			missing = append(missing, c)
		}
	}
	if len(missing) > 0 {
		return fail(name, "controllers missing: %s", strings.Join(missing, " "))
	}
	if dockerOK {
		v, err := d.Runner.Output(ctx, "docker", "info", "--format", "{{.CgroupVersion}}")
		if err != nil {
			return fail(name, "docker info: %v", err)
		}
		if got := strings.TrimSpace(string(v)); got != "2" {
			return fail(name, "the host has it, but docker uses cgroup v%s", got)
		}
	}
	return pass(name, "cpuset, memory and pids controllers")
}

// checkAgentVersion runs the installed units' buildkite-agent --version:
// older than bkagent.MinVersion fails (a running job would never see a
// cancel or its timeout); another version than the tested one passes with
// a note, since control agents and nodes must run the same one.
func (d *Doctor) checkAgentVersion(ctx context.Context, unit string) Check {
	const name = "buildkite-agent"
	bin := d.agentBinary(unit)
	out, err := d.Runner.Output(ctx, bin, "--version")
	if err != nil {
		return fail(name, "%s --version: %v (install %s)", bin, err, bkagent.TestedVersion)
	}
	v, err := bkagent.ParseVersion(string(out))
	if err != nil {
		return fail(name, "%s: %v", bin, err)
	}
	if err := bkagent.CheckVersion(v); err != nil {
		return fail(name, "%v", err)
	}
	if v.String() != bkagent.TestedVersion {
		return pass(name, "%s %s (kbgen is tested with %s; the control agents must run the same version)", bin, v, bkagent.TestedVersion)
	}
	return pass(name, "%s %s", bin, v)
}

// agentBinary is the executable of the installed unit's ExecStart, or
// the packages' default.
func (d *Doctor) agentBinary(unit string) string {
	if f := strings.Fields(d.unitSetting(unit, "ExecStart")); len(f) > 0 {
		return f[0]
	}
	return DefaultAgentBinary
}

// unitSetting is the value of key= in the installed unit file, or "".
func (d *Doctor) unitSetting(unit, key string) string {
	data, err := fs.ReadFile(d.Root, strings.TrimPrefix(path.Join(SystemdDir, unit), "/"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key+"="); ok {
			return rest
		}
	}
	return ""
}

func (d *Doctor) checkUnit(ctx context.Context, unit string) Check {
	out, err := d.Runner.Output(ctx, "systemctl", "is-active", unit)
	state := strings.TrimSpace(string(out))
	if err != nil || state != "active" {
		if state == "" {
			state = fmt.Sprint(err)
		}
		return fail(unit, "%s (journalctl -u %s)", state, unit)
	}
	return pass(unit, "active")
}

// probeScript prints what a step sees from inside its container, one
// key=value per line. cgroup v2 paths first; the v1 fallbacks only let the
// probe be tested on v1 engines (a node must pass the cgroup v2 check).
const probeScript = `first() { for f in "$@"; do if [ -r "$f" ]; then cat "$f"; return; fi; done; echo none; }
echo "cpus=$(first /sys/fs/cgroup/cpuset.cpus.effective /sys/fs/cgroup/cpuset/cpuset.effective_cpus)"
echo "mems=$(first /sys/fs/cgroup/cpuset.mems.effective /sys/fs/cgroup/cpuset/cpuset.effective_mems)"
mem=$(first /sys/fs/cgroup/memory.max /sys/fs/cgroup/memory/memory.limit_in_bytes)
echo "memory=$mem"
if [ -r /sys/fs/cgroup/memory.swap.max ]; then echo "swap=$(cat /sys/fs/cgroup/memory.swap.max)"
elif [ -r /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes ]; then echo "swap=$(( $(cat /sys/fs/cgroup/memory/memory.memsw.limit_in_bytes) - mem ))"
else echo "swap=none"; fi
if command -v nvidia-smi >/dev/null 2>&1; then nvidia-smi -L | sed 's/^/gpu=/'; fi
if [ -e /dev/kfd ]; then for n in /dev/dri/renderD*; do [ -e "$n" ] && echo "gpu=$n"; done; fi
true`

func (d *Doctor) checkIsolation(ctx context.Context, p *Plan, a *Agent, dockerOK bool) Check {
	name := "isolation " + a.ID
	switch {
	case d.SkipContainers:
		return Check{Name: name, Skipped: true, Detail: "skipped: --skip-containers"}
	case d.Image == "":
		return Check{Name: name, Skipped: true, Detail: "skipped: no runner image (the installed queue is not in the vendor registry: pass --image)"}
	}
	if !dockerOK {
		return fail(name, "not checked: docker is not reachable")
	}
	spec, err := sandbox.OnPlacement{
		Placement:    a.EnvLookup(p.Runtime, p.CgroupVersion),
		Image:        d.Image,
		Runtime:      p.Runtime,
		Host:         d.SandboxHost,
		Name:         "kbgen-doctor-" + a.ID,
		Command:      []string{"sh", "-c", probeScript},
		RunnerBinary: d.RunnerBinary,
		NoGPU:        d.NoGPU,
	}.DockerRun()
	if err != nil {
		return fail(name, "sandbox refuses this agent's placement: %v", err)
	}
	out, err := d.Runner.Output(ctx, "docker", spec.Argv()...)
	if err != nil {
		return fail(name, "docker run with the sandbox's argv failed: %v", err)
	}
	return judgeProbe(name, a, string(out))
}

// judgeProbe compares what the container saw with the agent's placement.
func judgeProbe(name string, a *Agent, out string) Check {
	seen := map[string]string{}
	var gpus []string
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), "=")
		if !ok {
			continue
		}
		if k == "gpu" {
			gpus = append(gpus, v)
			continue
		}
		seen[k] = v
	}
	var problems []string
	if len(gpus) != 1 {
		problems = append(problems, fmt.Sprintf("sees %d GPUs, want exactly 1", len(gpus)))
	} else if a.GPU.UUID != "" && strings.HasPrefix(a.GPU.UUID, "GPU-") && a.GPU.RenderNode == "" && !strings.Contains(gpus[0], a.GPU.UUID) {
		problems = append(problems, fmt.Sprintf("sees %q, not %s", gpus[0], a.GPU.UUID))
	}
	if got, err := cpulist.Parse(seen["cpus"]); err != nil || got.String() != a.CPUSet {
		problems = append(problems, fmt.Sprintf("cpuset %q, want %s", seen["cpus"], a.CPUSet))
	}
	if seen["mems"] != a.Mems {
		problems = append(problems, fmt.Sprintf("mems %q, want %s", seen["mems"], a.Mems))
	}
	if seen["memory"] != strconv.FormatInt(a.MemoryBytes, 10) {
		problems = append(problems, fmt.Sprintf("memory.max %q, want %d", seen["memory"], a.MemoryBytes))
	}
	if seen["swap"] != "0" {
		problems = append(problems, fmt.Sprintf("memory.swap.max %q, want 0", seen["swap"]))
	}
	if len(problems) > 0 {
		return fail(name, "%s", strings.Join(problems, "; "))
	}
	return pass(name, "one GPU, cpuset %s, mems %s, memory %s, no swap", a.CPUSet, a.Mems, a.Memory)
}

// checkKernelLog says whether the clean-GPU check can read the GPU fault
// reports (NVIDIA's Xid, amdgpu's timeouts and resets): it reads
// /dev/kmsg as the agents' user, which works only where
// kernel.dmesg_restrict is 0 or the agents' unit grants CAP_SYSLOG. A
// warning: the check's other parts run either way.
func (d *Doctor) checkKernelLog() Check {
	const name = "GPU fault reports"
	data, err := fs.ReadFile(d.Root, "proc/sys/kernel/dmesg_restrict")
	if err != nil {
		return Check{Name: name, Skipped: true, Detail: "not checked: no /proc/sys/kernel/dmesg_restrict"}
	}
	if strings.TrimSpace(string(data)) == "0" {
		return pass(name, "the agents can read the kernel log (kernel.dmesg_restrict = 0): the clean-GPU check sees Xid and amdgpu reports")
	}
	if strings.Contains(d.unitSetting(UnitName, "AmbientCapabilities"), "CAP_SYSLOG") {
		return pass(name, "the agents' unit grants CAP_SYSLOG: the clean-GPU check sees Xid and amdgpu reports")
	}
	return Check{Name: name, Skipped: true, Detail: "kernel.dmesg_restrict = 1: the clean-GPU check cannot read Xid or amdgpu reports as the agents' user (each job log says so; its other checks run). To let it: sysctl -w kernel.dmesg_restrict=0, or AmbientCapabilities=CAP_SYSLOG in a drop-in of " + UnitName + " (docs/isolation.md)"}
}

// ProfilingModprobe is the modprobe.d file `kbgen node install
// --allow-profiling` writes: NVIDIA's driver then lets any user read the
// GPU performance counters, which ncu in a sandboxed profile-mode step
// (uid 1000, no capabilities) needs.
const ProfilingModprobe = "/etc/modprobe.d/kbgen-nvidia-profiling.conf"

// ProfilingModprobeLine is its content.
const ProfilingModprobeLine = "options nvidia NVreg_RestrictProfilingToAdminUsers=0\n"

// checkProfiling reads the driver's RmProfilingAdminOnly
// (/proc/driver/nvidia/params; NVreg_RestrictProfilingToAdminUsers):
// with 1, the default, ncu in a profile-mode step fails with
// ERR_NVGPUCTRPERM, since the step is not root and has no CAP_SYS_ADMIN.
// A warning, not a failure: a node may choose not to run profile jobs.
func (d *Doctor) checkProfiling() Check {
	const name = "GPU profiling counters"
	data, err := fs.ReadFile(d.Root, "proc/driver/nvidia/params")
	if err != nil {
		return Check{Name: name, Skipped: true, Detail: "not checked: no /proc/driver/nvidia/params"}
	}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != "RmProfilingAdminOnly" {
			continue
		}
		if strings.TrimSpace(v) == "0" {
			return pass(name, "open to non-root users (RmProfilingAdminOnly: 0): ncu works in profile-mode steps")
		}
		return Check{Name: name, Skipped: true, Detail: "admin only (RmProfilingAdminOnly: 1): profile-mode steps get ERR_NVGPUCTRPERM from ncu; `kbgen node install --allow-profiling` writes " + ProfilingModprobe + " (takes effect when the driver reloads; docs/vendor-onboarding.md)"}
	}
	return Check{Name: name, Skipped: true, Detail: "not checked: the driver's params have no RmProfilingAdminOnly"}
}
