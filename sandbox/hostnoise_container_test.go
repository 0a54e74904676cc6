package sandbox

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
	"github.com/gpu-mode/kbgen/internal/noisepolicy"
	"github.com/gpu-mode/kbgen/internal/testimage"
	"github.com/gpu-mode/kbgen/noise"
	"github.com/gpu-mode/kbgen/payload"
	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// TestContainerHostNoise: `kbgen run` in a real container on the last
// CPU runs a benchmark (a shell "submission": its noise.json is the
// runner's, sealed) while its submission writes a forged noise.json
// with a clean host section into the out dir and, on the host, a busy
// loop pinned to that CPU runs through the whole job. The published
// noise.json is the runner's with the sandbox's host section naming the
// busy loop; the top verdict turns noisy; the exit code stays the
// container's.
func TestContainerHostNoise(t *testing.T) {
	image := testimage.ShellPython(t)
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Skipf("SKIPPED: no taskset to pin the host's busy loop (apt-get install util-linux): %v", err)
	}
	cpu := strconv.Itoa(runtime.NumCPU() - 1)
	busy := exec.Command(taskset, "-c", cpu, "sh", "-c", "while :; do :; done")
	if err := busy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = busy.Process.Kill(); _ = busy.Wait() })
	// taskset execs sh: wait until the pid is the loop, so both samples
	// see the same process.
	comm := filepath.Join("/proc", strconv.Itoa(busy.Process.Pid), "comm")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if b, _ := os.ReadFile(comm); strings.TrimSpace(string(b)) == "sh" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the busy loop never started")
		}
	}

	cfg := plugincfg.GPUDocker{GPUs: 1, CPUs: 1, Memory: "128m", Network: "none", Image: image, Runtime: "nvidia"}
	env := map[string]string{contract.EnvGPUUUID: "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b", contract.EnvCPUSet: cpu, contract.EnvMems: "0", contract.EnvMemory: "256m"}
	pl, err := dockerargv.PlacementFromEnv(lookup(env))
	if err != nil {
		t.Fatal(err)
	}
	name := dockerargv.ContainerName("host-noise-" + strconv.Itoa(os.Getpid()))
	stage := NewStage(t.TempDir(), name, true)
	kbgen := kbgenbin.Path(t)
	forged := strings.ReplaceAll(forgedNoise, "\n", "")
	job, err := json.Marshal(map[string]any{
		"lang": "py", "mode": "benchmark", "main": "eval.py", "tests": []map[string]any{{"n": 1}}, "benchmarks": []map[string]any{{"n": 1}},
		"sources": map[string]string{"submission.py": "echo '" + forged + "' > /kbgen/out/noise.json\n", "eval.py": "sleep 2\n"},
	})
	if err != nil {
		t.Fatal(err)
	}
	enc, err := payload.Encode(job)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := dockerargv.DockerRun(cfg, pl, dockerargv.LocalHost(), dockerargv.Options{
		Name: name, Command: []string{"kbgen", "run"},
		RunnerBinary: kbgen, PayloadFile: stage.PayloadFile, NoGPU: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", spec.Name).Run() })
	j := &Job{Spec: spec, Stage: stage, Runner: kbgen, payload: enc, policy: noisepolicy.Policy{}.WithDefaults()}
	var stdout, stderr bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out := t.TempDir()
	o, err := j.Run(ctx, &Launcher{Stdout: &stdout, Stderr: &stderr}, out)
	if err != nil || o.Code != 0 || o.HostNoiseErr != nil || o.Vouch == nil || !o.Vouch.Verified {
		t.Fatalf("run: err %v, code %d, merge %v\nstdout:\n%s\nstderr:\n%s", err, o.Code, o.HostNoiseErr, stdout.String(), stderr.String())
	}
	rec, err := noise.Read(filepath.Join(out, contract.NoiseFile))
	if err != nil {
		t.Fatal(err)
	}
	// The runner's own record (its benchmark ran on the container's
	// CPU), not the one the submission wrote into the out dir.
	if b := rec.Runs["benchmark"]; b == nil || b.CPUs != cpu {
		t.Errorf("noise.json runs = %+v, want the runner's benchmark on CPU %s", rec.Runs, cpu)
	}
	h := rec.Host
	if h == nil || h.Verdict != noise.Noisy || rec.Verdict != noise.Noisy || h.CPUs != cpu {
		t.Fatalf("verdict %s, host %+v: want the sandbox's noisy host section for CPU %s", rec.Verdict, h, cpu)
	}
	found := false
	for _, p := range h.Foreign.Top {
		found = found || p.PID == busy.Process.Pid
	}
	if !found {
		t.Errorf("host section top %+v does not name the busy loop (pid %d)", h.Foreign.Top, busy.Process.Pid)
	}
	t.Logf("host section: %.1f %% foreign over %.0f ms, engine %.0f ms, top %+v, cost %.2f ms", h.Foreign.CPUPercent, h.DurationMS, h.EngineMS, h.Foreign.Top, h.CostMS)
}
