package runner

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestProbeReadsNvidiaSmi(t *testing.T) {
	p := StartProbe(context.Background(), standIns(t))
	info, found, why := p.Wait()
	if !found || info.GPU != "NVIDIA H100 80GB HBM3" || info.DeviceCount != 2 || info.Runtime != "CUDA" || why != "" {
		t.Errorf("probe: %+v found=%v why=%q", info, found, why)
	}
	host, _ := os.Hostname()
	if info.Hostname != host || info.Platform == "" || !strings.HasPrefix(info.Platform, "Linux-") {
		t.Errorf("host/platform: %+v", info)
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil && strings.Contains(string(b), "model name") && info.CPU == "" {
		t.Error("no CPU model")
	}
}

func TestProbeReportsDriverFailure(t *testing.T) {
	info, found, why := StartProbe(context.Background(), standIns(t, "NVSMI_FAIL=1")).Wait()
	if found || info.DeviceCount != 1 || info.GPU != "" || !strings.Contains(why, "couldn't communicate with the NVIDIA driver") {
		t.Errorf("probe: %+v found=%v why=%q", info, found, why)
	}
}

func TestProbeWithoutGPUTools(t *testing.T) {
	env := []string{"PATH=" + t.TempDir()}
	if py, err := lookPathIn("python3", []string{"PATH=" + os.Getenv("PATH")}); err == nil {
		// python3 alone, without nvidia-smi or rocm-smi.
		dir := filepath.Dir(env[0][len("PATH="):] + "/x")
		if err := os.Symlink(py, filepath.Join(dir, "python3")); err != nil {
			t.Fatal(err)
		}
	}
	info, found, why := StartProbe(context.Background(), env).Wait()
	if found || why != "" || info.DeviceCount != 1 || info.Runtime != "" {
		t.Errorf("probe: %+v found=%v why=%q", info, found, why)
	}
}

func TestRocmSmiParsing(t *testing.T) {
	bin := t.TempDir()
	script := "#!/bin/sh\necho '{\"card0\": {\"Card Series\": \"AMD Instinct MI300X\"}, \"card1\": {\"Card Series\": \"AMD Instinct MI300X\"}}'\n"
	if err := os.WriteFile(filepath.Join(bin, "rocm-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	info, found, _ := StartProbe(context.Background(), []string{"PATH=" + bin}).Wait()
	if !found || info.GPU != "AMD Instinct MI300X" || info.DeviceCount != 2 || info.Runtime != "ROCm" {
		t.Errorf("probe: %+v", info)
	}
}

// TestProbeDeviceCountIsTheSandboxGrant: rocm-smi in a container lists
// every card of the host (sysfs is shared); the sandbox's KBGEN_GPU_COUNT
// is what the container was given, and so device_count (and POPCORN_GPUS).
func TestProbeDeviceCountIsTheSandboxGrant(t *testing.T) {
	t.Parallel()
	bin := t.TempDir()
	script := "#!/bin/sh\necho '{\"card0\": {\"Card Series\": \"AMD Instinct MI300X\"}, \"card1\": {\"Card Series\": \"AMD Instinct MI300X\"}, \"card2\": {}, \"card3\": {}}'\n"
	if err := os.WriteFile(filepath.Join(bin, "rocm-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		grant string
		want  int
	}{
		{"no grant: what the tool lists", "", 4},
		{"granted two of four", "KBGEN_GPU_COUNT=2", 2},
		{"a grant that is not a number", "KBGEN_GPU_COUNT=two", 4},
		{"a zero grant", "KBGEN_GPU_COUNT=0", 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			env := []string{"PATH=" + bin}
			if tt.grant != "" {
				env = append(env, tt.grant)
			}
			info, found, _ := StartProbe(context.Background(), env).Wait()
			if !found || info.DeviceCount != tt.want {
				t.Errorf("device_count %d (found %v), want %d", info.DeviceCount, found, tt.want)
			}
		})
	}
}

// BenchmarkProbe measures what the probes cost when run on their own; the
// runner overlaps them with the job, so this is a bound, not an addition.
func BenchmarkProbe(b *testing.B) {
	env := os.Environ()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		StartProbe(context.Background(), env).Wait()
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "ms/probe")
	}
}

func TestPlatformMatchesPython(t *testing.T) {
	want := pythonEval(t, "import platform\nprint(json.dumps([platform.platform()]))", []string{})
	if got := platformString(); got != want[0] {
		t.Errorf("platform %q, want Python's %q", got, want[0])
	}
}

func TestTorchVersionFromDistInfo(t *testing.T) {
	venv := t.TempDir()
	if err := os.MkdirAll(filepath.Join(venv, "lib", "python3.11", "site-packages", "torch-2.5.1+cu124.dist-info"), 0o755); err != nil {
		t.Fatal(err)
	}
	if got := torchVersion([]string{"PATH=" + t.TempDir(), "VIRTUAL_ENV=" + venv}); got != "2.5.1+cu124" {
		t.Errorf("torch version %q", got)
	}
}
