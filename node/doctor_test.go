package node

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/gpu-mode/kbgen"
	"github.com/gpu-mode/kbgen/internal/size"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// fakeNode is a machine for the doctor: canned command output, and a
// docker that "runs" the probe by reporting what its argv grants.
type fakeNode struct {
	outputs map[string]string // "name arg..." → stdout; absent → not found
	// leak makes the fake container see every GPU (a broken runtime).
	leak  bool
	gpus  []string // nvidia-smi -L lines of the whole machine
	calls []string
}

func (f *fakeNode) Output(ctx context.Context, name string, args ...string) ([]byte, error) {
	call := strings.Join(append([]string{name}, args...), " ")
	f.calls = append(f.calls, call)
	if name == "docker" && len(args) > 0 && args[0] == "run" {
		return []byte(f.container(args)), nil
	}
	out, ok := f.outputs[call]
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, errors.ErrUnsupported)
	}
	return []byte(out), nil
}

func flagValue(argv []string, flag string) string {
	if i := slices.Index(argv, flag); i >= 0 && i+1 < len(argv) {
		return argv[i+1]
	}
	return ""
}

func (f *fakeNode) container(argv []string) string {
	mem, _ := size.Parse(flagValue(argv, "--memory"))
	swap, _ := size.Parse(flagValue(argv, "--memory-swap"))
	var b strings.Builder
	fmt.Fprintf(&b, "cpus=%s\nmems=%s\nmemory=%d\nswap=%d\n", flagValue(argv, "--cpuset-cpus"), flagValue(argv, "--cpuset-mems"), mem, swap-mem)
	dev := strings.TrimPrefix(flagValue(argv, "--gpus"), "device=")
	for _, g := range f.gpus {
		if f.leak || strings.Contains(g, dev) && dev != "" {
			fmt.Fprintf(&b, "gpu=%s\n", g)
		}
	}
	for i, a := range argv {
		if a == "--device" && strings.Contains(argv[i+1], "renderD") {
			fmt.Fprintf(&b, "gpu=%s\n", strings.Split(argv[i+1], ":")[0])
		}
	}
	return b.String()
}

// installedRoot is a machine root with box's plan installed.
func installedRoot(t *testing.T, box, queue string) fstest.MapFS {
	t.Helper()
	root := fstest.MapFS{
		"sys/fs/cgroup/cgroup.controllers": {Data: []byte("cpuset cpu io memory hugetlb pids rdma misc\n")},
	}
	// Installed as kbgen node install does: the plugin pinned by default.
	files, err := Render(planFixture(t, box, defaultOpts), InstallOptions{Queue: queue, Plugin: kbgen.GPUDockerPlugin()})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		root[strings.TrimPrefix(f.Path, "/")] = &fstest.MapFile{Data: f.Data, Mode: f.Mode}
	}
	// The host's services, confined to the housekeeping CPUs as the
	// installed drop-ins make them.
	host := planFixture(t, box, defaultOpts).HostCPUs
	for pid, comm := range map[string]string{"1": "systemd", "812": "dockerd", "640": "containerd", "2001": "buildkite-agent"} {
		root["proc/"+pid+"/comm"] = &fstest.MapFile{Data: []byte(comm + "\n")}
		root["proc/"+pid+"/status"] = &fstest.MapFile{Data: []byte("Name:\t" + comm + "\nCpus_allowed_list:\t" + host + "\n")}
	}
	// A step's process inside its container is not a host service.
	root["proc/3000/comm"] = &fstest.MapFile{Data: []byte("python3\n")}
	root["proc/3000/status"] = &fstest.MapFile{Data: []byte("Cpus_allowed_list:\t1-13,113-125\n")}
	return root
}

func h100Node(t *testing.T) *fakeNode {
	smi, err := os.ReadFile("testdata/h100x8/nvidia-smi.csv")
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeNode{outputs: map[string]string{
		"nvidia-smi " + strings.Join(NvidiaSMIArgs, " "): string(smi),
		"docker version --format {{.Server.Version}}":    "27.3.1\n",
		"docker info --format {{.CgroupVersion}}":        "2\n",
		"nvidia-ctk --version":                           "NVIDIA Container Toolkit CLI version 1.17.3\n",
		DefaultAgentBinary + " --version":                "buildkite-agent version 3.52.1, build 8\n",
	}}
	for i, line := range strings.Split(strings.TrimSpace(string(smi)), "\n") {
		uuid := strings.TrimSpace(strings.Split(line, ",")[1])
		f.gpus = append(f.gpus, fmt.Sprintf("GPU %d: NVIDIA H100 80GB HBM3 (UUID: %s)", i, uuid))
		f.outputs[fmt.Sprintf("systemctl is-active buildkite-agent-gpu@%d.service", i)] = "active\n"
	}
	return f
}

func newDoctor(root fs.FS, r Runner) *Doctor {
	return &Doctor{Root: root, Runner: r, Image: "kbgen-runner:test", RunnerBinary: "/usr/local/bin/kbgen",
		SandboxHost: dockerargv.Host{SysfsRoot: "testdata/h100x8/sys", KFD: "/dev/kfd", Stat: func(string) (dockerargv.Device, error) {
			return dockerargv.Device{CharDevice: true, GID: 44}, nil
		}}}
}

func summarize(checks []Check) (failed []string, lines int) {
	for _, c := range checks {
		if !c.OK && !c.Skipped {
			failed = append(failed, c.Name+": "+c.Detail)
		}
	}
	return failed, len(checks)
}

func TestDoctorHealthyNVIDIA(t *testing.T) {
	t.Parallel()
	f := h100Node(t)
	checks := newDoctor(installedRoot(t, "h100x8", "nvidia-h100"), f).Run(context.Background())
	failed, n := summarize(checks)
	if len(failed) > 0 {
		t.Errorf("healthy node failed checks:\n%s", strings.Join(failed, "\n"))
	}
	// installed, driver, docker, toolkit, profiling counters (skipped:
	// no driver params here), GPU fault reports (skipped: no /proc here),
	// cgroup, static kbgen (skipped), plugin pin, agent version,
	// kbgen-nvml (skipped), 8 units, housekeeping, 8 isolation probes.
	if n != 7+4+8+1+8 {
		t.Errorf("%d checks, want 28", n)
	}
	// The probe runs exactly the sandbox's argv: --gpus by UUID and the
	// agent's cpuset, no network.
	var run string
	for _, c := range f.calls {
		if strings.HasPrefix(c, "docker run --name kbgen-doctor-gpu5 ") {
			run = c
		}
	}
	for _, want := range []string{"--gpus device=GPU-5a1c5555-4c1e-2f6a-9d0b-e3f1a2b40005", "--cpuset-cpus 70-82,182-194", "--cpuset-mems 1", "--network none", "--memory 247g", "--memory-swap 247g"} {
		if !strings.Contains(run, want) {
			t.Errorf("probe for gpu5 lacks %q: %s", want, run)
		}
	}
}

func TestDoctorFailures(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		break_ func(f *fakeNode, root fstest.MapFS)
		want   []string // "check name: detail substring"
	}{
		{"runtime leaks every GPU", func(f *fakeNode, root fstest.MapFS) { f.leak = true },
			[]string{"isolation gpu0: sees 8 GPUs, want exactly 1"}},
		{"agent down", func(f *fakeNode, root fstest.MapFS) {
			f.outputs["systemctl is-active buildkite-agent-gpu@3.service"] = "failed\n"
		}, []string{"buildkite-agent-gpu@3.service: failed"}},
		{"dockerd not confined", func(f *fakeNode, root fstest.MapFS) {
			root["proc/812/status"] = &fstest.MapFile{Data: []byte("Name:\tdockerd\nCpus_allowed_list:\t0-223\n")}
		}, []string{"housekeeping CPUs: 1 of 4 host processes may run on the agents' CPUs (dockerd[812] on 0-223)"}},
		{"no services visible", func(f *fakeNode, root fstest.MapFS) {
			for _, pid := range []string{"1", "812", "640", "2001"} {
				delete(root, "proc/"+pid+"/comm")
			}
		}, []string{"housekeeping CPUs: no host service"}},
		{"cgroup v1", func(f *fakeNode, root fstest.MapFS) {
			delete(root, "sys/fs/cgroup/cgroup.controllers")
		}, []string{"cgroup v2: /sys/fs/cgroup is not cgroup v2"}},
		{"docker on cgroup v1", func(f *fakeNode, root fstest.MapFS) {
			f.outputs["docker info --format {{.CgroupVersion}}"] = "1\n"
		}, []string{"cgroup v2: the host has it, but docker uses cgroup v1"}},
		{"no toolkit", func(f *fakeNode, root fstest.MapFS) { delete(f.outputs, "nvidia-ctk --version") },
			[]string{"NVIDIA container toolkit: neither nvidia-ctk"}},
		{"GPU fell off the bus", func(f *fakeNode, root fstest.MapFS) {
			k := "nvidia-smi " + strings.Join(NvidiaSMIArgs, " ")
			lines := strings.Split(strings.TrimSpace(f.outputs[k]), "\n")
			f.outputs[k] = strings.Join(lines[:7], "\n")
		}, []string{"GPU driver: 7× NVIDIA H100 80GB HBM3, but 8 agents are installed"}},
		{"no docker", func(f *fakeNode, root fstest.MapFS) {
			delete(f.outputs, "docker version --format {{.Server.Version}}")
		}, []string{"docker: cannot reach the docker engine", "isolation gpu7: not checked: docker is not reachable"}},
		{"agent v3.50.1", func(f *fakeNode, root fstest.MapFS) {
			f.outputs[DefaultAgentBinary+" --version"] = "buildkite-agent version 3.50.1, build 3\n"
		}, []string{"buildkite-agent: buildkite-agent 3.50.1 is older than 3.50.2: a running job would never see a cancel or its timeout"}},
		{"no agent", func(f *fakeNode, root fstest.MapFS) {
			delete(f.outputs, DefaultAgentBinary+" --version")
		}, []string{"buildkite-agent: /usr/bin/buildkite-agent --version:"}},
		{"nothing installed", func(f *fakeNode, root fstest.MapFS) {
			delete(root, "etc/buildkite-agent/kbgen/plan.json")
		}, []string{"agents installed: no /etc/buildkite-agent/kbgen/plan.json", "agent units: not checked"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := h100Node(t)
			root := installedRoot(t, "h100x8", "nvidia-h100")
			tt.break_(f, root)
			failed, _ := summarize(newDoctor(root, f).Run(context.Background()))
			for _, w := range tt.want {
				if !slices.ContainsFunc(failed, func(s string) bool { return strings.HasPrefix(s, w) }) {
					t.Errorf("no failure %q in:\n%s", w, strings.Join(failed, "\n"))
				}
			}
			if len(failed) == 0 {
				t.Error("broken node passed")
			}
		})
	}
}

func TestDoctorAMD(t *testing.T) {
	t.Parallel()
	root := installedRoot(t, "mi300xx8", "amd-mi300")
	sys := os.DirFS("testdata/mi300xx8/sys")
	if err := fsWalkCopy(sys, root, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	// fsWalkCopy wrote sys paths at the top; move them under sys/.
	for p, f := range root {
		if strings.HasPrefix(p, "bus/") || strings.HasPrefix(p, "class/") || strings.HasPrefix(p, "devices/") {
			root["sys/"+p] = f
			delete(root, p)
		}
	}
	root["dev/kfd"] = &fstest.MapFile{Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666}
	for i := 128; i < 136; i++ {
		root[fmt.Sprintf("dev/dri/renderD%d", i)] = &fstest.MapFile{Mode: fs.ModeDevice | fs.ModeCharDevice | 0o666}
	}
	f := &fakeNode{outputs: map[string]string{
		"docker version --format {{.Server.Version}}": "27.3.1\n",
		"docker info --format {{.CgroupVersion}}":     "2\n",
		DefaultAgentBinary + " --version":             "buildkite-agent version 3.60.0, build 1\n",
	}}
	for i := 0; i < 8; i++ {
		f.outputs[fmt.Sprintf("systemctl is-active buildkite-agent-gpu@%d.service", i)] = "active\n"
	}
	d := newDoctor(root, f)
	d.SandboxHost.SysfsRoot = "testdata/mi300xx8/sys"
	failed, n := summarize(d.Run(context.Background()))
	if len(failed) > 0 || n != 26 {
		t.Errorf("%d checks, failures:\n%s", n, strings.Join(failed, "\n"))
	}
	delete(root, "dev/dri/renderD133")
	failed, _ = summarize(d.Run(context.Background()))
	if !slices.ContainsFunc(failed, func(s string) bool {
		return strings.HasPrefix(s, "ROCm devices: not character devices: /dev/dri/renderD133")
	}) {
		t.Errorf("missing render node not reported:\n%s", strings.Join(failed, "\n"))
	}
}

func TestJudgeProbe(t *testing.T) {
	t.Parallel()
	a := &Agent{ID: "gpu0", GPU: GPU{UUID: "GPU-a"}, CPUSet: "2-4,10-12", Mems: "0", Memory: "1g", MemoryBytes: 1 << 30}
	good := "cpus=2-4,10-12\nmems=0\nmemory=1073741824\nswap=0\ngpu=GPU 0: X (UUID: GPU-a)\n"
	if c := judgeProbe("x", a, good); !c.OK {
		t.Errorf("good probe failed: %s", c.Detail)
	}
	for _, tt := range []struct{ out, want string }{
		{strings.Replace(good, "cpus=2-4,10-12", "cpus=0-15", 1), `cpuset "0-15"`},
		{strings.Replace(good, "mems=0", "mems=0-1", 1), `mems "0-1"`},
		{strings.Replace(good, "memory=1073741824", "memory=max", 1), `memory.max "max"`},
		{strings.Replace(good, "swap=0", "swap=max", 1), `memory.swap.max "max"`},
		{strings.Replace(good, "GPU-a", "GPU-b", 1), `not GPU-a`},
		{good + "gpu=GPU 1: X (UUID: GPU-b)\n", "sees 2 GPUs"},
		{"", "sees 0 GPUs"},
	} {
		if c := judgeProbe("x", a, tt.out); c.OK || !strings.Contains(c.Detail, tt.want) {
			t.Errorf("probe %q: ok=%v %q, want failure %q", tt.out, c.OK, c.Detail, tt.want)
		}
	}
}

// TestDoctorProfiling: doctor reads the driver's RmProfilingAdminOnly
// and says what profile-mode steps will meet; it never fails the node.
func TestDoctorProfiling(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name, params string
		ok, skipped  bool
		want         string
	}{
		{"open", "ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 0\n", true, false, "ncu works"},
		{"admin only", "RmProfilingAdminOnly: 1\n", false, true, "--allow-profiling"},
		{"no params", "", false, true, "not checked"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := fstest.MapFS{}
			if tt.params != "" {
				root["proc/driver/nvidia/params"] = &fstest.MapFile{Data: []byte(tt.params)}
			}
			c := (&Doctor{Root: root}).checkProfiling()
			if c.OK != tt.ok || c.Skipped != tt.skipped || !strings.Contains(c.Detail, tt.want) {
				t.Errorf("%+v: want ok %v, skipped %v, saying %q", c, tt.ok, tt.skipped, tt.want)
			}
		})
	}
}

// TestRenderAllowProfiling: --allow-profiling writes the modprobe.d line
// on an NVIDIA node, nothing on an AMD one.
func TestRenderAllowProfiling(t *testing.T) {
	t.Parallel()
	for box, want := range map[string]bool{"h100x8": true, "mi300xx8": false} {
		files, err := Render(planFixture(t, box, defaultOpts), InstallOptions{Queue: "q", AllowProfiling: true})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, f := range files {
			if f.Path == ProfilingModprobe {
				found = strings.HasSuffix(string(f.Data), "options nvidia NVreg_RestrictProfilingToAdminUsers=0\n")
			}
		}
		if found != want {
			t.Errorf("%s: modprobe.d file written %v, want %v", box, found, want)
		}
	}
}

// TestRenderAllowGPUReset: --allow-gpu-reset writes a root-only sudoers
// drop-in naming exactly each whole GPU's reset command (a PCI address
// escaped as sudoers wants it; no MIG instance) and sets KBGEN_GPU_RESET
// for every agent; without it, neither.
func TestRenderAllowGPUReset(t *testing.T) {
	t.Parallel()
	tests := []struct {
		box, want string
		lines     int
	}{
		{"h100x8", "buildkite-agent ALL=(root) NOPASSWD: /usr/bin/nvidia-smi --gpu-reset -i GPU-", 8},
		{"mi300xx8", `buildkite-agent ALL=(root) NOPASSWD: /opt/rocm/bin/amd-smi reset -g 0000\:`, 8},
	}
	for _, tt := range tests {
		t.Run(tt.box, func(t *testing.T) {
			t.Parallel()
			for _, allow := range []bool{true, false} {
				files, err := Render(planFixture(t, tt.box, defaultOpts), InstallOptions{Queue: "q", AllowGPUReset: allow})
				if err != nil {
					t.Fatal(err)
				}
				sudoers, envs := "", 0
				for _, f := range files {
					if f.Path == ResetSudoers && f.Mode == 0o440 {
						sudoers = string(f.Data)
					}
					if strings.HasSuffix(f.Path, "/agent.env") && strings.Contains(string(f.Data), "\nKBGEN_GPU_RESET=1\n") {
						envs++
					}
				}
				if !allow {
					if sudoers != "" || envs != 0 {
						t.Errorf("without --allow-gpu-reset: sudoers %q, %d agents with KBGEN_GPU_RESET", sudoers, envs)
					}
					continue
				}
				if strings.Count(sudoers, tt.want) != tt.lines || envs == 0 {
					t.Errorf("sudoers:\n%s\nwant %d lines like %q; %d agents with KBGEN_GPU_RESET", sudoers, tt.lines, tt.want, envs)
				}
			}
		})
	}
}

// TestRenderRefusesABadUser: the user lands in the unit and the sudoers
// line, so a name with a space, a newline or a ':' is refused.
func TestRenderRefusesABadUser(t *testing.T) {
	t.Parallel()
	for _, user := range []string{"a b", "kb\nALL ALL=(ALL) ALL", "x:y", "-rf"} {
		if _, err := Render(planFixture(t, "h100x8", defaultOpts), InstallOptions{Queue: "q", User: user, AllowGPUReset: true}); !isOption(err, "User") {
			t.Errorf("user %q: %v, want a refusal", user, err)
		}
	}
}

// TestDoctorKernelLog: doctor says whether the agents can read the GPU
// fault reports: dmesg_restrict 0, or CAP_SYSLOG in their unit, passes;
// 1 without it is a warning naming both ways; no /proc is not checked.
func TestDoctorKernelLog(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, restrict, unit string
		ok, skipped          bool
		want                 string
	}{
		{"open", "0\n", "", true, false, "dmesg_restrict = 0"},
		{"restricted", "1\n", "", false, true, "sysctl -w kernel.dmesg_restrict=0, or AmbientCapabilities=CAP_SYSLOG"},
		{"restricted, the unit grants CAP_SYSLOG", "1\n", "[Service]\nAmbientCapabilities=CAP_SYSLOG\n", true, false, "grants CAP_SYSLOG"},
		{"no /proc", "", "", false, true, "not checked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			root := fstest.MapFS{}
			if tt.restrict != "" {
				root["proc/sys/kernel/dmesg_restrict"] = &fstest.MapFile{Data: []byte(tt.restrict)}
			}
			if tt.unit != "" {
				root[strings.TrimPrefix(SystemdDir+"/"+UnitName, "/")] = &fstest.MapFile{Data: []byte(tt.unit)}
			}
			c := (&Doctor{Root: root}).checkKernelLog()
			if c.OK != tt.ok || c.Skipped != tt.skipped || !strings.Contains(c.Detail, tt.want) {
				t.Errorf("%+v: want ok %v, skipped %v, saying %q", c, tt.ok, tt.skipped, tt.want)
			}
		})
	}
}

// TestDoctorStagedRoot: doctor --root DIR --skip-containers on a staged
// root says the flags are why a check did not run: no proc/ under the
// root is the running machine's to check (it once failed with "open proc:
// no such file"), and the probes were skipped by --skip-containers (it
// once said "no runner image").
func TestDoctorStagedRoot(t *testing.T) {
	t.Parallel()
	root := installedRoot(t, "h100x8", "nvidia-h100")
	for p := range root {
		if strings.HasPrefix(p, "proc/") {
			delete(root, p)
		}
	}
	d := newDoctor(root, h100Node(t))
	d.Image, d.SkipContainers = "", true
	want := map[string]string{
		"housekeeping CPUs": "not checked: no proc/ under --root",
		"isolation gpu0":    "skipped: --skip-containers",
	}
	for _, c := range d.Run(context.Background()) {
		if w, ok := want[c.Name]; ok {
			if !c.Skipped || !strings.HasPrefix(c.Detail, w) {
				t.Errorf("%s: skipped %v, %q; want skipped with %q", c.Name, c.Skipped, c.Detail, w)
			}
			delete(want, c.Name)
		}
	}
	if len(want) > 0 {
		t.Errorf("checks missing: %v", want)
	}
}
