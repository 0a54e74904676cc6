package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/syncbuf"
	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// testTmp holds what the whole test process shares (the static kbgen).
var testTmp string

func TestMain(m *testing.M) {
	if dir := os.Getenv("KBGEN_TEST_SEALER"); dir != "" {
		os.Exit(sealerMain(dir))
	}
	dir, err := os.MkdirTemp("", "kbgen-sandbox-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testTmp = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// plantedSecret is put in the host env the sandbox reads; it must never
// appear inside a container.
const plantedSecret = "planted-secret-3f9c"

// containerRun is one real `docker run` of the sandbox's argv (GPU flags
// left out: this engine has no GPU runtime).
type containerRun struct {
	code           int
	stdout, stderr string
	stage          Stage
}

// runInSandbox plans cfg on an agent owning the last CPU of this machine
// and runs script under busybox sh in the real container.
func runInSandbox(t *testing.T, cfg plugincfg.GPUDocker, script string) containerRun {
	t.Helper()
	image := testimage.Busybox(t)
	kbgen := kbgenbin.Path(t)
	cfg.Image = image
	cfg.Runtime = "nvidia"
	cpu := strconv.Itoa(runtime.NumCPU() - 1)
	hostEnv := map[string]string{
		contract.EnvGPUUUID: "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b", contract.EnvCPUSet: cpu, contract.EnvMems: "0", contract.EnvMemory: "256m",
		"KERNELBOT_RUN_ID": "run-1", "BUILDKITE_AGENT_ACCESS_TOKEN": plantedSecret, "AWS_SECRET_ACCESS_KEY": plantedSecret,
	}
	pl, err := dockerargv.PlacementFromEnv(lookup(hostEnv))
	if err != nil {
		t.Fatal(err)
	}
	name := dockerargv.ContainerName(strings.NewReplacer("/", "-", "#", "-").Replace(t.Name()))
	stage := NewStage(t.TempDir(), name, true)
	if err := stage.Create("eJx-payload-" + plantedSecret); err != nil {
		t.Fatal(err)
	}
	spec, err := dockerargv.DockerRun(cfg, pl, dockerargv.LocalHost(), dockerargv.Options{
		Name: name, Command: []string{"sh", "-c", script}, RunnerBinary: kbgen,
		PayloadFile: stage.PayloadFile, Env: dockerargv.ContainerEnv(lookup(hostEnv)), NoGPU: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	flags := spec.Lines[:len(spec.Lines)-1] // the last line is the script
	if strings.Contains(fmt.Sprint(flags), plantedSecret) {
		t.Fatal("a planted secret reached docker's argv")
	}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	l := &Launcher{Stdout: &stdout, Stderr: &stderr}
	code, err := l.Run(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	return containerRun{code: code, stdout: stdout.String(), stderr: stderr.String(), stage: stage}
}

// probeScript prints key=value facts a submission could observe. It runs
// under busybox sh; both cgroup layouts are read.
const probeScript = `
cg=/sys/fs/cgroup
if [ -f $cg/cgroup.controllers ]; then
  echo cgroup=v2
  echo cpuset.cpus=$(cat $cg/cpuset.cpus.effective)
  echo cpuset.mems=$(cat $cg/cpuset.mems.effective)
  echo memory.max=$(cat $cg/memory.max)
  echo memory.swap.max=$(cat $cg/memory.swap.max 2>/dev/null || echo unavailable)
  echo pids.max=$(cat $cg/pids.max)
else
  echo cgroup=v1
  echo cpuset.cpus=$(cat $cg/cpuset/cpuset.effective_cpus)
  echo cpuset.mems=$(cat $cg/cpuset/cpuset.effective_mems)
  echo memory.max=$(cat $cg/memory/memory.limit_in_bytes)
  echo memory.memsw.max=$(cat $cg/memory/memory.memsw.limit_in_bytes 2>/dev/null || echo unavailable)
  echo pids.max=$(cat $cg/pids/pids.max)
fi
echo cpus_allowed=$(grep Cpus_allowed_list /proc/self/status | cut -f2)
echo shm_kb=$(df -k /dev/shm | tail -1 | awk '{print $2}') shm_inodes=$(df -i /dev/shm | tail -1 | awk '{print $2}')
echo net=$(ls /sys/class/net | tr '\n' ' ')
echo capeff=$(grep CapEff /proc/self/status | cut -f2)
echo capbnd=$(grep CapBnd /proc/self/status | cut -f2)
echo nonewprivs=$(grep NoNewPrivs /proc/self/status | cut -f2)
echo uid=$(id -u) gid=$(id -g)
touch /rootfs-probe 2>/dev/null && echo root=writable || echo root=readonly
echo hi > /work/probe && echo work=writable || echo work=readonly
printf '#!/bin/sh\necho ran\n' > /work/x.sh && chmod +x /work/x.sh && [ "$(/work/x.sh)" = ran ] && echo work_exec=yes || echo work_exec=no
echo hi > /tmp/probe && echo tmp=writable || echo tmp=readonly
cat /kbgen/payload >/dev/null && echo payload=readable || echo payload=unreadable
(echo x >> /kbgen/payload) 2>/dev/null && echo payload_write=yes || echo payload_write=no
rm -f /kbgen/payload 2>/dev/null && echo payload_rm=yes || echo payload_rm=no
(echo x > /usr/local/bin/kbgen) 2>/dev/null && echo runner_write=yes || echo runner_write=no
echo '{"success": true}' > /kbgen/out/result.json && echo out=writable || echo out=readonly
echo out_fs=$(df -k /kbgen/out | tail -1 | awk '{print $1}') out_kb=$(df -k /kbgen/out | tail -1 | awk '{print $2}') out_inodes=$(df -i /kbgen/out | tail -1 | awk '{print $2}')
echo work_inodes=$(df -i /work | tail -1 | awk '{print $2}') tmp_inodes=$(df -i /tmp | tail -1 | awk '{print $2}')
echo runner=$(kbgen version | cut -d' ' -f1)
echo env_buildkite=$(env | grep -c '^BUILDKITE_')
echo env_secret=$(env | grep -c ` + plantedSecret + `)
echo env_payload=$(env | grep -c '^KERNELBOT_PAYLOAD')
echo env_run_id=$KERNELBOT_RUN_ID
echo pid1=$(cat /proc/1/comm)
`

func parseFacts(out string) map[string]string {
	facts := map[string]string{}
	for _, line := range strings.Split(out, "\n") {
		for _, kv := range strings.Fields(line) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				facts[k] = v
			}
		}
		// These hold free text.
		for _, k := range []string{"net", "bomb_error"} {
			if rest, ok := strings.CutPrefix(line, k+"="); ok {
				facts[k] = strings.TrimSpace(rest)
			}
		}
	}
	return facts
}

// TestContainerIsolation runs the sandbox's real argv and checks, from
// inside, everything a submission would see. docs/isolation.md lists
// which of these this engine proves and which are argv-only.
func TestContainerIsolation(t *testing.T) {
	cfg := plugincfg.GPUDocker{GPUs: 1, CPUs: 1, Memory: "192m", ShmSize: "32m", PidsLimit: 128, Network: "none"}
	r := runInSandbox(t, cfg, probeScript)
	if r.code != 0 {
		t.Fatalf("probe exited %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	f := parseFacts(r.stdout)
	t.Logf("facts from inside the container: %v", f)
	cpu := strconv.Itoa(runtime.NumCPU() - 1)
	want := map[string]string{
		"cpuset.cpus":   cpu,
		"cpus_allowed":  cpu,
		"cpuset.mems":   "0",
		"memory.max":    strconv.Itoa(192 << 20),
		"pids.max":      "128",
		"shm_kb":        strconv.Itoa(32 << 10),
		"shm_inodes":    strconv.Itoa(dockerargv.ShmInodes),
		"net":           "lo",
		"capeff":        "0000000000000000",
		"capbnd":        "0000000000000000",
		"nonewprivs":    "1",
		"uid":           "1000",
		"gid":           "1000",
		"root":          "readonly",
		"work":          "writable",
		"work_exec":     "yes",
		"tmp":           "writable",
		"payload":       "readable",
		"payload_write": "no",
		"payload_rm":    "no",
		"runner_write":  "no",
		"out":           "writable",
		"out_fs":        "tmpfs",
		"out_kb":        strconv.Itoa(192 << 10),
		"out_inodes":    strconv.Itoa(dockerargv.OutDirInodes),
		"work_inodes":   strconv.Itoa(dockerargv.ScratchInodes),
		"tmp_inodes":    strconv.Itoa(dockerargv.ScratchInodes),
		"runner":        "kbgen",
		"env_buildkite": "0",
		"env_secret":    "0",
		"env_payload":   "0",
		"env_run_id":    "run-1",
		"pid1":          "docker-init",
	}
	for k, v := range want {
		if f[k] != v {
			t.Errorf("inside the container %s = %q, want %q", k, f[k], v)
		}
	}
	// Swap: with --memory-swap equal to --memory the memory+swap limit
	// equals the memory limit (v1) or swap.max is 0 (v2). An engine without
	// swap accounting cannot show it: name it and skip only this check.
	switch {
	case f["memory.memsw.max"] == "unavailable" || f["memory.swap.max"] == "unavailable":
		t.Logf("SKIPPED memory-swap assertion: this kernel has no swap accounting (memsw/swap.max missing); --memory-swap is argv-only here")
	case f["cgroup"] == "v1" && f["memory.memsw.max"] != strconv.Itoa(192<<20):
		t.Errorf("memory.memsw.limit_in_bytes = %q, want %d (no swap)", f["memory.memsw.max"], 192<<20)
	case f["cgroup"] == "v2" && f["memory.swap.max"] != "0":
		t.Errorf("memory.swap.max = %q, want 0", f["memory.swap.max"])
	}
	// The out dir is the container's own tmpfs: what was written there
	// is nowhere on the host, and the stage holds only the payload.
	if ents, err := os.ReadDir(r.stage.Dir); err != nil || len(ents) != 1 || ents[0].Name() != "payload" {
		t.Errorf("the stage holds %v (%v), want only the payload", ents, err)
	}
	if b, _ := os.ReadFile(r.stage.PayloadFile); !strings.HasPrefix(string(b), "eJx-payload") {
		t.Errorf("payload file changed on the host: %q", b)
	}
}

// TestContainerForkBomb: a fork bomb is stopped by --pids-limit, inside
// the container, and the container still exits normally.
func TestContainerForkBomb(t *testing.T) {
	cfg := plugincfg.GPUDocker{GPUs: 1, CPUs: 1, Memory: "192m", ShmSize: "16m", PidsLimit: 64, Network: "none"}
	// The bomb runs in a subshell, which dies when fork fails (busybox sh
	// treats it as fatal); the parent then only uses builtins, which need
	// no fork, to report what the cgroup holds while the children live.
	script := `
( i=0; while [ $i -lt 1000 ]; do sleep 5 & i=$((i+1)); done ) 2>/tmp/bomb.err
echo bomb_exit=$?
f=/sys/fs/cgroup/pids/pids.current
[ -f $f ] || f=/sys/fs/cgroup/pids.current
read n < $f
echo pids.current=$n
read e < /tmp/bomb.err
echo "bomb_error=$e"
exit 0
`
	start := time.Now()
	r := runInSandbox(t, cfg, script)
	f := parseFacts(r.stdout)
	t.Logf("fork bomb: exit %d in %v, %v; stderr has %d lines", r.code, time.Since(start).Round(time.Millisecond), f, strings.Count(r.stderr, "\n"))
	n, err := strconv.Atoi(f["pids.current"])
	if err != nil {
		t.Fatalf("no pids.current from inside: %q\nstdout:\n%s\nstderr:\n%.2000s", f["pids.current"], r.stdout, r.stderr)
	}
	if n > 64 {
		t.Errorf("pids.current = %d after a fork bomb, want at most the limit 64", n)
	}
	if f["bomb_exit"] == "0" || !strings.Contains(f["bomb_error"], "fork") {
		t.Errorf("the fork bomb did not hit the limit: exit %q, error %q", f["bomb_exit"], f["bomb_error"])
	}
	if r.code != 0 {
		t.Errorf("container exit %d after the bomb, want 0: the rest of the container keeps working", r.code)
	}
}

// TestContainerMemoryHog: a process allocating past --memory is OOM-killed
// (exit 137) instead of swapping or touching the host.
func TestContainerMemoryHog(t *testing.T) {
	cfg := plugincfg.GPUDocker{GPUs: 1, CPUs: 1, Memory: "64m", ShmSize: "16m", PidsLimit: 64, Network: "none"}
	// dd's block buffer is one allocation it fills from /dev/zero: 512 MiB
	// of touched memory in a 64 MiB container.
	start := time.Now()
	r := runInSandbox(t, cfg, `dd if=/dev/zero of=/dev/null bs=512M count=1; echo dd_exit=$?`)
	f := parseFacts(r.stdout)
	t.Logf("memory hog: exit %d in %v, %v", r.code, time.Since(start).Round(time.Millisecond), f)
	if f["dd_exit"] != "137" && r.code != 137 {
		t.Errorf("memory hog was not killed: dd exit %q, container exit %d\nstdout:\n%s\nstderr:\n%s", f["dd_exit"], r.code, r.stdout, r.stderr)
	}
}

// TestContainerOOMKilledAsked: after a 137 the real engine is asked
// whether it OOM-killed the container (its oom event; the --rm container
// is gone): yes for a process that outgrew --memory, no for docker kill.
func TestContainerOOMKilledAsked(t *testing.T) {
	image := runInSandboxImage(t)
	for _, tt := range []struct {
		name, script string
		kill         bool
		oom          bool
	}{
		{"out of memory", "exec dd if=/dev/zero of=/dev/null bs=512M count=1", false, true},
		{"docker kill", "echo started; exec sleep 60", true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			spec := plannedSpec(t, image, "oom-"+strings.ReplaceAll(tt.name, " ", "-"), tt.script)
			var stdout syncbuf.Buffer
			l := &Launcher{Stdout: &stdout, Stderr: io.Discard}
			if tt.kill {
				go func() {
					for deadline := time.Now().Add(time.Minute); !strings.Contains(stdout.String(), "started") && time.Now().Before(deadline); {
						time.Sleep(50 * time.Millisecond)
					}
					_ = exec.Command("docker", "kill", spec.Name).Run()
				}()
			}
			code, end, err := l.run(context.Background(), spec)
			if err != nil || code != 137 {
				t.Fatalf("run = %d, %v; want 137", code, err)
			}
			if end.OOMErr != nil || end.OOM != tt.oom {
				t.Errorf("the engine says OOM-killed %v (%v), want %v", end.OOM, end.OOMErr, tt.oom)
			}
		})
	}
}

// runInSandboxImage is the busybox test image (skipping without Docker).
func runInSandboxImage(t *testing.T) string {
	t.Helper()
	return testimage.Busybox(t)
}

// plannedSpec plans script under busybox sh on CPU 0 with small limits.
func plannedSpec(t *testing.T, image, name, script string) *dockerargv.Spec {
	t.Helper()
	pl, err := dockerargv.PlacementFromEnv(lookup(map[string]string{contract.EnvGPUUUID: "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b", contract.EnvCPUSet: "0", contract.EnvMems: "0", contract.EnvMemory: "128m"}))
	if err != nil {
		t.Fatal(err)
	}
	stage := NewStage(t.TempDir(), dockerargv.ContainerName(name), false)
	if err := stage.Create(""); err != nil {
		t.Fatal(err)
	}
	spec, err := dockerargv.DockerRun(plugincfg.GPUDocker{Image: image, Runtime: "nvidia"}, pl, dockerargv.LocalHost(), dockerargv.Options{
		Name: dockerargv.ContainerName(name), Command: []string{"sh", "-c", script}, RunnerBinary: kbgenbin.Path(t), NoGPU: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", spec.Name).Run() })
	return spec
}

// TestContainerStaleAndSignals: a container left running under the job's
// name is removed before the run, and SIGTERM to the sandbox stops the
// real container (exit 143) and leaves nothing behind.
func TestContainerStaleAndSignals(t *testing.T) {
	image := testimage.Busybox(t)
	name := dockerargv.ContainerName("stale-and-signals")
	if out, err := exec.Command("docker", "run", "-d", "--name", name, image, "sleep", "300").CombinedOutput(); err != nil {
		t.Fatalf("starting the stale container: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })

	kbgen := kbgenbin.Path(t)
	pl, err := dockerargv.PlacementFromEnv(lookup(map[string]string{contract.EnvGPUUUID: "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b", contract.EnvCPUSet: "0", contract.EnvMems: "0", contract.EnvMemory: "128m"}))
	if err != nil {
		t.Fatal(err)
	}
	stage := NewStage(t.TempDir(), name, false)
	if err := stage.Create(""); err != nil {
		t.Fatal(err)
	}
	spec, err := dockerargv.DockerRun(plugincfg.GPUDocker{Image: image, Runtime: "nvidia"}, pl, dockerargv.LocalHost(), dockerargv.Options{
		Name: name, Command: []string{"sh", "-c", "echo started; sleep 300"}, RunnerBinary: kbgen, NoGPU: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	var stdout, logs syncbuf.Buffer
	sigs := make(chan os.Signal, 1)
	l := &Launcher{Stdout: &stdout, Stderr: &stdout, Log: &logs, Signals: sigs, StopTimeout: 5 * time.Second}
	go func() {
		deadline := time.Now().Add(60 * time.Second)
		for !strings.Contains(stdout.String(), "started") && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		sigs <- syscall.SIGTERM
	}()
	start := time.Now()
	l.RemoveStale(context.Background(), spec)
	code, err := l.Run(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d after %v; log: %s", code, time.Since(start).Round(time.Millisecond), logs.String())
	if !strings.Contains(logs.String(), "removed stale container "+name) {
		t.Errorf("the stale container was not reported removed: %q", logs.String())
	}
	if code != 143 {
		t.Errorf("exit code = %d, want 143 (SIGTERM reached the command through docker stop and tini)", code)
	}
	if out, err := exec.Command("docker", "ps", "-aq", "--filter", "name=^"+name+"$").Output(); err != nil || len(bytes.TrimSpace(out)) != 0 {
		t.Errorf("container %s still exists after the run: %q, %v", name, out, err)
	}
}

// TestContainerStaleOnLeasedGPU: a SIGKILLed sandbox leaves its `docker run
// --rm` container running (the container outlives its client) after the
// kernel has dropped its GPU lease. The next job leased that GPU removes
// it before its own run, whatever its name, and leaves the container of
// another GPU alone: on a real node the leftover's submission would
// otherwise share the GPU with the next job.
func TestContainerStaleOnLeasedGPU(t *testing.T) {
	image := testimage.Busybox(t)
	suffix := strconv.FormatInt(time.Now().UnixNano(), 36)
	leftover, other, next := "kbgen-leftover-"+suffix, "kbgen-other-"+suffix, "kbgen-next-"+suffix
	for name, gpu := range map[string]string{leftover: "GPU-x-" + suffix, other: "GPU-y-" + suffix} {
		if out, err := exec.Command("docker", "run", "-d", "--rm", "--name", name, "--label", dockerargv.GPUsLabel+"="+gpu, image, "sleep", "300").CombinedOutput(); err != nil {
			t.Fatalf("starting %s: %v: %s", name, err, out)
		}
		t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", name).Run() })
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", next).Run() })
	spec := &dockerargv.Spec{Name: next, GPUs: []string{"GPU-x-" + suffix}, Lines: [][]string{
		{"run"}, {"--name", next}, {"--rm"}, {"--label", dockerargv.GPUsLabel + "=GPU-x-" + suffix}, {image}, {"true"},
	}}
	var logs syncbuf.Buffer
	l := &Launcher{Stdout: io.Discard, Stderr: io.Discard, Log: &logs, StopTimeout: 5 * time.Second}
	l.RemoveStale(context.Background(), spec)
	if code, err := l.Run(context.Background(), spec); err != nil || code != 0 {
		t.Fatalf("run: %d %v", code, err)
	}
	if !strings.Contains(logs.String(), "removed stale container "+leftover+" (left by a killed job on GPU GPU-x-"+suffix) {
		t.Errorf("the leftover was not reported removed: %q", logs.String())
	}
	running := func(name string) bool {
		out, err := exec.Command("docker", "ps", "-q", "--filter", "name=^"+name+"$").Output()
		return err == nil && len(bytes.TrimSpace(out)) > 0
	}
	if running(leftover) {
		t.Errorf("%s still runs on the GPU the next job leased", leftover)
	}
	if !running(other) {
		t.Errorf("%s, on another GPU, was removed", other)
	}
}
