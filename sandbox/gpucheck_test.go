package sandbox

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

const (
	cleanUUID = "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	otherUUID = "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a00"
)

// standInSMI writes a stand-in nvidia-smi printing state for --query-gpu
// and apps for --query-compute-apps (the queries the check makes, as
// nvidia-smi's CSV with noheader,nounits), and returns its PATH.
func standInSMI(t *testing.T, state, apps string) string {
	t.Helper()
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "state.csv"), []byte(state), 0o644)
	os.WriteFile(filepath.Join(dir, "apps.csv"), []byte(apps), 0o644)
	script := "#!/bin/sh\ncase \"$1\" in\n" +
		"--query-gpu=uuid,memory.used,ecc.errors.uncorrected.volatile.total) cat " + dir + "/state.csv ;;\n" +
		"--query-compute-apps=gpu_uuid,pid,process_name,used_memory) cat " + dir + "/apps.csv ;;\n" +
		"*) echo \"stand-in nvidia-smi: unexpected $*\" >&2; exit 2 ;;\nesac\n"
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestGPUCheck: a leased GPU with a compute process, memory in use or new
// ECC errors refuses the job (75); a clean one passes; another GPU's
// state does not matter.
func TestGPUCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, state, apps, ecc string // ecc: the count the last job left
		ids                    []string
		want                   string // "" passes
	}{
		{"clean", cleanUUID + ", 1, 0\n", "", "", []string{cleanUUID}, ""},
		{"a neighbour's GPU busy", cleanUUID + ", 1, 0\n" + otherUUID + ", 70000, 3\n", otherUUID + ", 4242, python3, 69000\n", "", []string{cleanUUID}, ""},
		{"a foreign compute process", cleanUUID + ", 500, 0\n", cleanUUID + ", 4242, python3, 480\n", "", []string{cleanUUID}, "compute process no job of this node owns (pid 4242, python3)"},
		{"memory in use", cleanUUID + ", 30000, 0\n", "", "", []string{cleanUUID}, "30000 MiB in use"},
		{"new ECC errors", cleanUUID + ", 1, 5\n", "", "3", []string{cleanUUID}, "2 new uncorrected ECC error(s)"},
		{"the same ECC count", cleanUUID + ", 1, 5\n", "", "5", []string{cleanUUID}, ""},
		{"no ECC on this GPU", cleanUUID + ", 1, [N/A]\n", "", "", []string{cleanUUID}, ""},
		{"a GPU off the bus", otherUUID + ", 1, 0\n", "", "", []string{cleanUUID}, "not listed by nvidia-smi"},
		{"one of a set dirty", cleanUUID + ", 1, 0\n" + otherUUID + ", 1, 0\n", otherUUID + ", 7, x\x1b[31m, 1\n", "", []string{cleanUUID, otherUUID}, "pid 7, x[31m"},
		{"MIG instances are not checked", "", "", "", []string{"MIG-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := standInSMI(t, tt.state, tt.apps)
			state := t.TempDir()
			if tt.ecc != "" {
				os.WriteFile(filepath.Join(state, "gpu-"+cleanUUID+".ecc"), []byte(tt.ecc), 0o644)
			}
			c := GPUCheck{StateDir: state, Lookup: func(k string) (string, bool) { return path, k == "PATH" }}
			err := c.Check(context.Background(), "nvidia", tt.ids)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused a clean GPU: %v", err)
				}
				return
			}
			if !IsRefused(err) || ExitCode(err) != 75 || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want a refusal (75) saying %q", err, tt.want)
			}
		})
	}
}

// TestGPUCheckRecordsECC: the count a check sees is the next job's
// baseline, so an error is reported once, not on every job after it.
func TestGPUCheckRecordsECC(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	for i, want := range []bool{true, false} {
		path := standInSMI(t, cleanUUID+", 1, 9\n", "")
		os.WriteFile(filepath.Join(state, "gpu-"+cleanUUID+".ecc"), []byte(map[bool]string{true: "8", false: "9"}[i == 0]), 0o644)
		err := GPUCheck{StateDir: state, Lookup: func(k string) (string, bool) { return path, k == "PATH" }}.Check(context.Background(), "nvidia", []string{cleanUUID})
		if (err != nil) != want {
			t.Errorf("check %d: %v, want refused %v", i, err, want)
		}
	}
}

// TestGPUCheckWithoutNvidiaSMI: a node without nvidia-smi logs that the
// check was skipped (docker --gpus fails there anyway); AMD is not
// checked.
func TestGPUCheckWithoutNvidiaSMI(t *testing.T) {
	t.Parallel()
	var logged string
	c := GPUCheck{StateDir: t.TempDir(), Lookup: func(k string) (string, bool) { return t.TempDir(), k == "PATH" },
		Logf: func(f string, a ...any) { logged = f }}
	if err := c.Check(context.Background(), "nvidia", []string{cleanUUID}); err != nil || !strings.Contains(logged, "skipped") {
		t.Errorf("err %v, log %q", err, logged)
	}
	if err := c.Check(context.Background(), "rocm", []string{"renderD128"}); err != nil {
		t.Errorf("rocm: %v", err)
	}
}

// TestJobRunRefusesADirtyGPU: kbgen sandbox checks its leased GPU before
// docker run; a dirty one means no container and exit 75.
func TestJobRunRefusesADirtyGPU(t *testing.T) {
	l, dir := fakeDocker(t)
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	env["PATH"] = standInSMI(t, cleanUUID+", 1, 0\n", cleanUUID+", 999, miner, 60000\n")
	host := fakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	_, err = j.Run(context.Background(), l, t.TempDir())
	if ExitCode(err) != 75 || !strings.Contains(err.Error(), "pid 999, miner") {
		t.Fatalf("dirty GPU: %v, want a refusal (75) naming the process", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "calls")); err == nil {
		t.Errorf("docker ran on a dirty GPU: %v", calls(t, dir))
	}
	if locked(t, filepath.Join(env[contract.EnvLeaseDir], "gpu-"+cleanUUID+".lock")) {
		t.Error("the refused job kept its lease")
	}
}
