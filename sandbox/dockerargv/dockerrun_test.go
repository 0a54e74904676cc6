package dockerargv_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv/dockerargvtest"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

func testConfig(runtime contract.Runtime) plugincfg.GPUDocker {
	return plugincfg.GPUDocker{Image: "kbgen-runner:test", Runtime: runtime, GPUs: 1, CPUs: 12, Memory: "200g", ShmSize: "32g", PidsLimit: 4096, Network: "none"}
}

func testOptions() dockerargv.Options {
	return dockerargv.Options{
		Name:         dockerargv.ContainerName("job-1"),
		Command:      []string{"kbgen", "run"},
		RunnerBinary: "/usr/local/bin/kbgen",
		PayloadFile:  "/tmp/kbgen-job-1/payload",
		Env:          dockerargv.ContainerEnv(contract.MapLookup(map[string]string{"KERNELBOT_RUN_ID": "run-7", "BUILDKITE_AGENT_ACCESS_TOKEN": "secret-token", "KERNELBOT_PAYLOAD": "eJx-secret-payload"})),
	}
}

func mustPlacement(t *testing.T, env map[string]string) dockerargv.Placement {
	t.Helper()
	p, err := dockerargv.PlacementFromEnv(contract.MapLookup(env))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlanNVIDIA(t *testing.T) {
	t.Parallel()
	s, err := dockerargv.DockerRun(testConfig("nvidia"), mustPlacement(t, dockerargvtest.NVIDIAPlacementEnv()), dockerargvtest.FakeHost(t, nil), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{
		"--gpus":         {"device=GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"},
		"--cpuset-cpus":  {"36-41,148-153"},
		"--cpuset-mems":  {"0"},
		"--memory":       {"200g"},
		"--memory-swap":  {"200g"},
		"--pids-limit":   {"4096"},
		"--network":      {"none"},
		"--cap-drop":     {"ALL"},
		"--security-opt": {"no-new-privileges"},
		"--user":         {dockerargv.ContainerUser},
		"--name":         {"kbgen-job-1"},
		"--device":       nil,
		"--env":          {"HOME=/tmp", "TMPDIR=/tmp", "KBGEN_SANDBOX=1", "KERNELBOT_RUN_ID=run-7", "KBGEN_REQUIRE_GPU=1", "KBGEN_GPU_COUNT=1"},
	}
	for name, vals := range want {
		if got := dockerargvtest.FlagValues(s, name); !slices.Equal(got, vals) {
			t.Errorf("%s = %q, want %q", name, got, vals)
		}
	}
	argv := strings.Join(s.Argv(), " ")
	for _, must := range []string{"--read-only", "--rm", "--interactive",
		"type=bind,source=/usr/local/bin/kbgen,target=/usr/local/bin/kbgen,readonly",
		"type=bind,source=/tmp/kbgen-job-1/payload,target=/kbgen/payload,readonly",
		"/work:rw,exec,nosuid,nodev,size=200g,nr_inodes=1048576,uid=1000,gid=1000,mode=0700",
		"/kbgen/out:rw,noexec,nosuid,nodev,size=256m,nr_inodes=1024,uid=1000,gid=1000,mode=0700",
		"--tmpfs /dev/shm:rw,noexec,nosuid,nodev,size=32g,nr_inodes=65536,mode=1777",
		"--entrypoint /usr/local/bin/kbgen kbgen-runner:test run --payload-file /kbgen/payload --out /kbgen/out/result.json --no-upload --sealed",
	} {
		if !strings.Contains(argv, must) {
			t.Errorf("argv lacks %q:\n%s", must, s)
		}
	}
	// No bind mount is writable: every writable path is a tmpfs.
	// No --init: the sealed runner is PID 1 (no dumpable PID 1 whose
	// /proc/1/fd the submission could open).
	for _, never := range []string{"secret", "BUILDKITE_", "KERNELBOT_PAYLOAD", "--privileged", "--runtime", "target=/kbgen/out", "--init", "--shm-size"} {
		if strings.Contains(argv, never) {
			t.Errorf("argv contains %q:\n%s", never, s)
		}
	}
	if got, want := s.Summary(), "kbgen-job-1: gpus device=GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b, cpuset-cpus 36-41,148-153, cpuset-mems 0, memory 200g, shm-size 32g, pids-limit 4096, network none"; got != want {
		t.Errorf("Summary() = %q, want %q", got, want)
	}
	if last := s.Lines[len(s.Lines)-2]; !slices.Equal(last, []string{"kbgen-runner:test"}) {
		t.Errorf("image line = %q", last)
	}
}

func TestPlanROCm(t *testing.T) {
	t.Parallel()
	s, err := dockerargv.DockerRun(testConfig("rocm"), mustPlacement(t, dockerargvtest.ROCmPlacementEnv()), dockerargvtest.FakeHost(t, dockerargvtest.AMDDevices), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if got := dockerargvtest.FlagValues(s, "--device"); !slices.Equal(got, []string{"/dev/kfd", "/dev/dri/renderD168"}) {
		t.Errorf("--device = %q, want /dev/kfd and exactly one render node", got)
	}
	if got := dockerargvtest.FlagValues(s, "--group-add"); !slices.Equal(got, []string{"110"}) {
		t.Errorf("--group-add = %q", got)
	}
	if got := dockerargvtest.FlagValues(s, "--gpus"); got != nil {
		t.Errorf("--gpus on ROCm: %q", got)
	}
}

func TestPlanNoGPU(t *testing.T) {
	t.Parallel()
	opts := testOptions()
	opts.NoGPU = true
	for _, rt := range []contract.Runtime{contract.RuntimeNVIDIA, contract.RuntimeROCm} {
		env := dockerargvtest.NVIDIAPlacementEnv()
		if rt == contract.RuntimeROCm {
			env = dockerargvtest.ROCmPlacementEnv()
		}
		s, err := dockerargv.DockerRun(testConfig(rt), mustPlacement(t, env), dockerargvtest.FakeHost(t, dockerargvtest.AMDDevices), opts)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"--gpus", "--device", "--group-add"} {
			if v := dockerargvtest.FlagValues(s, f); v != nil {
				t.Errorf("%s: NoGPU still has %s %q", rt, f, v)
			}
		}
	}
}

// A job run by hand on a machine without a GPU runtime (kbgen sandbox
// --no-gpu) needs no GPU placement; with the GPU, a missing one is refused.
func TestPlanNoGPUNeedsNoGPUPlacement(t *testing.T) {
	t.Parallel()
	env := dockerargvtest.NVIDIAPlacementEnv()
	delete(env, contract.EnvGPUUUID)
	pl := mustPlacement(t, env)
	opts := testOptions()
	if _, err := dockerargv.DockerRun(testConfig(contract.RuntimeNVIDIA), pl, dockerargvtest.FakeHost(t, dockerargvtest.AMDDevices), opts); !refusal.IsRefused(err) {
		t.Fatalf("with the GPU and no KERNELBOT_GPU_UUID: %v, want a refusal", err)
	}
	opts.NoGPU = true
	s, err := dockerargv.DockerRun(testConfig(contract.RuntimeNVIDIA), pl, dockerargvtest.FakeHost(t, dockerargvtest.AMDDevices), opts)
	if err != nil {
		t.Fatalf("NoGPU with no GPU placement: %v", err)
	}
	if v := dockerargvtest.FlagValues(s, "--gpus"); v != nil {
		t.Errorf("NoGPU still has --gpus %q", v)
	}
}

func TestPlanDefaults(t *testing.T) {
	t.Parallel()
	cfg := plugincfg.GPUDocker{Image: "img", Runtime: "nvidia"}
	env := dockerargvtest.NVIDIAPlacementEnv()
	delete(env, contract.EnvPidsMax)
	delete(env, contract.EnvShmMax)
	env[contract.EnvMemory] = "4g"
	s, err := dockerargv.DockerRun(cfg, mustPlacement(t, env), dockerargvtest.FakeHost(t, nil), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{
		"--cpuset-cpus": "36-47,148-159", // the whole agent cpuset
		"--memory":      "4g",            // the agent's memory
		"--pids-limit":  "4096",
	} {
		if got := dockerargvtest.FlagValues(s, name); len(got) != 1 || got[0] != want {
			t.Errorf("%s = %q, want %q", name, got, want)
		}
	}
	if got := s.ShmSize(); got != "4g" { // default 8g capped at the memory
		t.Errorf("/dev/shm size = %q, want 4g", got)
	}
}

// TestPlanSizes: a size in any spelling internal/size reads (the
// registry's validation reads it the same way) reaches docker as whole
// units, the same bytes.
func TestPlanSizes(t *testing.T) {
	t.Parallel()
	tests := []struct{ name, memory, shm, wantMemory, wantShm string }{
		{"whole gibibytes", "64g", "16g", "64g", "16g"},
		{"fractions", "1.5g", "0.5g", "1536m", "512m"},
		{"docker's other spellings", "64GiB", "8 gb", "64g", "8g"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(contract.RuntimeNVIDIA)
			cfg.Memory, cfg.ShmSize = tt.memory, tt.shm
			s, err := dockerargv.DockerRun(cfg, mustPlacement(t, dockerargvtest.NVIDIAPlacementEnv()), dockerargvtest.FakeHost(t, nil), testOptions())
			if err != nil {
				t.Fatal(err)
			}
			if m, shm := dockerargvtest.FlagValues(s, "--memory"), s.ShmSize(); len(m) != 1 || m[0] != tt.wantMemory || shm != tt.wantShm {
				t.Errorf("--memory %q, --shm-size %q; want %s, %s", m, shm, tt.wantMemory, tt.wantShm)
			}
		})
	}
}

func TestPlanRefuses(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		runtime contract.Runtime
		cfg     func(*plugincfg.GPUDocker)
		env     func(map[string]string)
		opts    func(*dockerargv.Options)
		refused bool // refusal.RefusedError (exit 75) rather than refusal.ConfigError (exit 2)
		want    string
	}{
		{"two gpus", "nvidia", func(c *plugincfg.GPUDocker) { c.GPUs = 2 }, nil, nil, true, "owns one GPU"},
		{"more cpus than cpuset", "nvidia", func(c *plugincfg.GPUDocker) { c.CPUs = 25 }, nil, nil, true, "25 CPUs asked"},
		{"more memory", "nvidia", func(c *plugincfg.GPUDocker) { c.Memory = "221g" }, nil, nil, true, "this agent owns 220g"},
		{"more shm than cap", "nvidia", func(c *plugincfg.GPUDocker) { c.ShmSize = "65g" }, nil, nil, true, "allows 64g"},
		{"more shm than memory", "nvidia", func(c *plugincfg.GPUDocker) { c.ShmSize = "16g"; c.Memory = "8g" }, nil, nil, true, "allows 8g"},
		{"more pids", "nvidia", func(c *plugincfg.GPUDocker) { c.PidsLimit = 9000 }, nil, nil, true, "allows 8192"},
		{"network", "nvidia", func(c *plugincfg.GPUDocker) { c.Network = "host" }, nil, nil, true, "no network"},
		{"no uuid", "nvidia", nil, func(e map[string]string) { delete(e, contract.EnvGPUUUID) }, nil, true, "KERNELBOT_GPU_UUID is not set"},
		{"bad uuid", "nvidia", nil, func(e map[string]string) { e[contract.EnvGPUUUID] = "GPU-3" }, nil, true, "not an NVIDIA GPU UUID"},
		{"uuid injection", "nvidia", nil, func(e map[string]string) { e[contract.EnvGPUUUID] = "all" }, nil, true, "not an NVIDIA GPU UUID"},
		{"no render node", "rocm", nil, func(e map[string]string) { delete(e, contract.EnvGPURenderNode) }, nil, true, "KERNELBOT_GPU_RENDER_NODE is not set"},
		{"render node missing", "rocm", nil, func(e map[string]string) { e[contract.EnvGPURenderNode] = "/dev/dri/renderD130" }, nil, true, "/dev/dri/renderD130 is not there"},
		{"render node not a device", "rocm", nil, func(e map[string]string) { e[contract.EnvGPURenderNode] = "/dev/dri/renderD200" }, nil, true, "not a character device"},
		{"render node path", "rocm", nil, func(e map[string]string) { e[contract.EnvGPURenderNode] = "/dev/dri/card0" }, nil, true, "not a render node"},
		{"comma in host path", "nvidia", nil, nil, func(o *dockerargv.Options) { o.PayloadFile = "/tmp/a,readonly=false" }, true, "comma"},
		{"no image", "nvidia", func(c *plugincfg.GPUDocker) { c.Image = "" }, nil, nil, false, "image: missing"},
		{"image like a flag", "nvidia", func(c *plugincfg.GPUDocker) { c.Image = "--privileged" }, nil, nil, false, "not an image reference"},
		{"unknown runtime", "cuda", nil, nil, nil, false, `"cuda" is not a GPU runtime`},
		{"no runtime", "", nil, nil, nil, false, "runtime: missing"},
		{"bad memory", "nvidia", func(c *plugincfg.GPUDocker) { c.Memory = "lots" }, nil, nil, false, "memory"},
		{"no command", "nvidia", nil, nil, func(o *dockerargv.Options) { o.Command = nil }, false, "no command"},
	}
	host := dockerargvtest.FakeHost(t, dockerargvtest.AMDDevices)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig(tt.runtime)
			if tt.cfg != nil {
				tt.cfg(&cfg)
			}
			env := dockerargvtest.NVIDIAPlacementEnv()
			if tt.runtime == "rocm" {
				env = dockerargvtest.ROCmPlacementEnv()
			}
			if tt.env != nil {
				tt.env(env)
			}
			opts := testOptions()
			if tt.opts != nil {
				tt.opts(&opts)
			}
			s, err := dockerargv.DockerRun(cfg, mustPlacement(t, env), host, opts)
			if err == nil {
				t.Fatalf("planned:\n%s", s)
			}
			// The message is the contract: the job log says what the step asked that the agent cannot give.
			if refusal.IsRefused(err) != tt.refused || refusal.IsConfigError(err) == tt.refused || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v (refused %v), want refused=%v mentioning %q", err, refusal.IsRefused(err), tt.refused, tt.want)
			}
		})
	}
}

func TestRunnerCommand(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want []string }{
		{[]string{"kbgen", "run"}, []string{dockerargv.ContainerRunner, "run", "--payload-file", dockerargv.ContainerPayload, "--out", dockerargv.ContainerResult, "--no-upload", "--sealed"}},
		{[]string{"kbgen", "run", "--verbose"}, []string{dockerargv.ContainerRunner, "run", "--payload-file", dockerargv.ContainerPayload, "--out", dockerargv.ContainerResult, "--no-upload", "--sealed", "--verbose"}},
		{[]string{"kbgen", "version"}, []string{"kbgen", "version"}},
		{[]string{"sh", "-c", "echo kbgen run"}, []string{"sh", "-c", "echo kbgen run"}},
	}
	for _, tt := range tests {
		if got := dockerargv.RunnerCommand(tt.in); !slices.Equal(got, tt.want) {
			t.Errorf("RunnerCommand(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
	// Only the runner gets a stdin (the key) and is sealed.
	for _, tt := range []struct {
		cmd    []string
		sealed bool
	}{{[]string{"kbgen", "run"}, true}, {[]string{"sh", "-c", "kbgen run"}, false}} {
		opts := testOptions()
		opts.Command = tt.cmd
		s, err := dockerargv.DockerRun(testConfig("nvidia"), mustPlacement(t, dockerargvtest.NVIDIAPlacementEnv()), dockerargvtest.FakeHost(t, nil), opts)
		if err != nil {
			t.Fatal(err)
		}
		if s.Sealed != tt.sealed || slices.Contains(s.Argv(), "--interactive") != tt.sealed {
			t.Errorf("%q: sealed %v, argv %q; want sealed and --interactive %v", tt.cmd, s.Sealed, s.Argv(), tt.sealed)
		}
	}
}

func TestContainerEnvIsAnAllowList(t *testing.T) {
	t.Parallel()
	host := map[string]string{
		"KERNELBOT_RUN_ID":             "run-1",
		"BUILDKITE_AGENT_ACCESS_TOKEN": "tok",
		"AWS_SECRET_ACCESS_KEY":        "aws",
		"KERNELBOT_PAYLOAD":            "payload",
		"PATH":                         "/host/bin",
		"CUDA_VISIBLE_DEVICES":         "3",
	}
	got := dockerargv.ContainerEnv(contract.MapLookup(host))
	want := []string{"HOME=/tmp", "TMPDIR=/tmp", "KBGEN_SANDBOX=1", "KERNELBOT_RUN_ID=run-1"}
	if !slices.Equal(got, want) {
		t.Errorf("ContainerEnv = %q, want %q", got, want)
	}
	// The noise policy passes; the retry count passes renamed, and only
	// as a number.
	host["KBGEN_NOISE_POLICY"] = "max_steal_percent=5,max_foreign_percent=1,retry=true"
	host["BUILDKITE_RETRY_COUNT"] = "1"
	got = dockerargv.ContainerEnv(contract.MapLookup(host))
	want = append(want, "KBGEN_NOISE_POLICY=max_steal_percent=5,max_foreign_percent=1,retry=true", "KBGEN_RETRY_COUNT=1")
	if !slices.Equal(got, want) {
		t.Errorf("ContainerEnv = %q, want %q", got, want)
	}
	host["BUILDKITE_RETRY_COUNT"] = "1; rm -rf /"
	if got := dockerargv.ContainerEnv(contract.MapLookup(host)); slices.ContainsFunc(got, func(s string) bool { return strings.HasPrefix(s, "KBGEN_RETRY_COUNT=") }) {
		t.Errorf("a retry count that is not a number got in: %q", got)
	}
}

func TestContainerName(t *testing.T) {
	t.Parallel()
	if got := dockerargv.ContainerName("0190a1b2-c3d4-4e5f-8a9b-0c1d2e3f4a5b"); got != "kbgen-0190a1b2-c3d4-4e5f-8a9b-0c1d2e3f4a5b" {
		t.Errorf("ContainerName = %q", got)
	}
	if got := dockerargv.ContainerName("a b/c;d"); got != "kbgen-a_b_c_d" {
		t.Errorf("ContainerName = %q", got)
	}
}

func TestErrorsUnwrap(t *testing.T) {
	t.Parallel()
	err := refusal.Refusef("x")
	if !refusal.IsRefused(errors.Join(errors.New("ctx"), err)) {
		t.Error("refusal.IsRefused does not see a wrapped refusal")
	}
}

// TestPlanRequiresGPUOnlyWithGPUFlags: a container given a GPU tells the
// runner that not seeing one is the machine's fault (exit 75); the test-only
// no-GPU plan must not, or every CPU test run would be "retried".
func TestPlanRequiresGPUOnlyWithGPUFlags(t *testing.T) {
	t.Parallel()
	for _, noGPU := range []bool{false, true} {
		opts := testOptions()
		opts.NoGPU = noGPU
		s, err := dockerargv.DockerRun(testConfig("nvidia"), mustPlacement(t, dockerargvtest.NVIDIAPlacementEnv()), dockerargvtest.FakeHost(t, nil), opts)
		if err != nil {
			t.Fatal(err)
		}
		has := slices.Contains(dockerargvtest.FlagValues(s, "--env"), "KBGEN_REQUIRE_GPU=1")
		if has == noGPU {
			t.Errorf("NoGPU=%v: KBGEN_REQUIRE_GPU=1 present=%v", noGPU, has)
		}
	}
}

func TestPlanNVMLHelper(t *testing.T) {
	t.Parallel()
	const mount = "type=bind,source=/opt/kbgen/kbgen-nvml,target=/usr/local/bin/kbgen-nvml,readonly"
	tests := []struct {
		name    string
		runtime contract.Runtime
		env     map[string]string
		devices map[string]dockerargv.Device
		noGPU   bool
		mounted bool
	}{
		{"NVIDIA", "nvidia", dockerargvtest.NVIDIAPlacementEnv(), nil, false, true},
		{"ROCm: no NVML", "rocm", dockerargvtest.ROCmPlacementEnv(), dockerargvtest.AMDDevices, false, false},
		{"no GPU", "nvidia", dockerargvtest.NVIDIAPlacementEnv(), nil, true, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := testOptions()
			opts.NVMLHelper, opts.NoGPU = "/opt/kbgen/kbgen-nvml", tc.noGPU
			s, err := dockerargv.DockerRun(testConfig(tc.runtime), mustPlacement(t, tc.env), dockerargvtest.FakeHost(t, tc.devices), opts)
			if err != nil {
				t.Fatal(err)
			}
			if got := slices.Contains(dockerargvtest.FlagValues(s, "--mount"), mount); got != tc.mounted {
				t.Errorf("helper mounted = %v, want %v:\n%s", got, tc.mounted, s)
			}
		})
	}
}
