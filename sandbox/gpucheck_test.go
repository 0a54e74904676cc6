package sandbox

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

const (
	cleanUUID = "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	otherUUID = "GPU-6f3b2a10-1c2d-4e5f-8a9b-0c1d2e3f4a00"
)

// standInSMI links testdata/stand-in-nvidia-smi (and stand-in-sudo, for
// the reset) into a directory with
// the CSV it prints: state for --query-gpu, apps for --query-compute-apps
// and remaps for --query-remapped-rows (none: it fails as an old driver
// does), and returns that directory for PATH.
func standInSMI(t *testing.T, state, apps string, remaps ...string) string {
	t.Helper()
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "state.csv"), []byte(state), 0o644))
	must(t, os.WriteFile(filepath.Join(dir, "apps.csv"), []byte(apps), 0o644))
	if len(remaps) > 0 {
		must(t, os.WriteFile(filepath.Join(dir, "remaps.csv"), []byte(remaps[0]), 0o644))
	}
	for _, name := range []string{"nvidia-smi", "sudo"} {
		script, err := filepath.Abs("testdata/stand-in-" + name)
		must(t, err)
		must(t, os.Symlink(script, filepath.Join(dir, name)))
	}
	return dir
}

// gpuRow is nvidia-smi's --query-gpu row of a GPU on bus 3b (cleanUUID)
// or 5e (otherUUID).
func gpuRow(uuid, used, ecc string) string {
	bus := map[string]string{cleanUUID: "00000000:3B:00.0", otherUUID: "00000000:5E:00.0"}[uuid]
	return uuid + ", " + bus + ", " + used + ", " + ecc + "\n"
}

// TestGPUCheck: a leased GPU with a compute process, memory in use, new
// ECC errors or a pending row remap refuses the job (75); a clean one
// passes; another GPU's state does not matter.
func TestGPUCheck(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, state, apps, remaps, ecc string // ecc: the count the last job left
		ids                            []string
		want                           string // "" passes
	}{
		{"clean", gpuRow(cleanUUID, "1", "0"), "", "", "", []string{cleanUUID}, ""},
		{"a neighbour's GPU busy", gpuRow(cleanUUID, "1", "0") + gpuRow(otherUUID, "70000", "3"), otherUUID + ", 4242, python3, 69000\n", "", "", []string{cleanUUID}, ""},
		{"a foreign compute process", gpuRow(cleanUUID, "500", "0"), cleanUUID + ", 4242, python3, 480\n", "", "", []string{cleanUUID}, "compute process no job of this node owns (pid 4242, python3)"},
		{"memory in use", gpuRow(cleanUUID, "30000", "0"), "", "", "", []string{cleanUUID}, "30000 MiB in use"},
		{"new ECC errors", gpuRow(cleanUUID, "1", "5"), "", "", "3", []string{cleanUUID}, "2 new uncorrected ECC error(s)"},
		{"the same ECC count", gpuRow(cleanUUID, "1", "5"), "", "", "5", []string{cleanUUID}, ""},
		{"no ECC on this GPU", gpuRow(cleanUUID, "1", "[N/A]"), "", "", "", []string{cleanUUID}, ""},
		{"a GPU off the bus", gpuRow(otherUUID, "1", "0"), "", "", "", []string{cleanUUID}, "not listed by nvidia-smi"},
		{"one of a set dirty", gpuRow(cleanUUID, "1", "0") + gpuRow(otherUUID, "1", "0"), otherUUID + ", 7, x\x1b[31m, 1\n", "", "", []string{cleanUUID, otherUUID}, "pid 7, x[31m"},
		{"a row remap pending", gpuRow(cleanUUID, "1", "0"), "", cleanUUID + ", Yes, No\n", "", []string{cleanUUID}, "row remap pending"},
		{"a row remap failed", gpuRow(cleanUUID, "1", "0"), "", cleanUUID + ", No, Yes\n", "", []string{cleanUUID}, "row remap fail"},
		{"no remap on a neighbour's", gpuRow(cleanUUID, "1", "0"), "", cleanUUID + ", No, No\n" + otherUUID + ", Yes, No\n", "", []string{cleanUUID}, ""},
		{"two problems, both said", gpuRow(cleanUUID, "30000", "0"), cleanUUID + ", 4242, python3, 480\n", "", "", []string{cleanUUID}, "(pid 4242, python3); GPU " + cleanUUID + " has 30000 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var path string
			if tt.remaps != "" {
				path = standInSMI(t, tt.state, tt.apps, tt.remaps)
			} else {
				path = standInSMI(t, tt.state, tt.apps)
			}
			state := t.TempDir()
			if tt.ecc != "" {
				os.WriteFile(filepath.Join(state, "gpu-"+cleanUUID+".ecc"), []byte(tt.ecc), 0o644)
			}
			c := GPUCheck{StateDir: state, KernelLog: emptyKernelLog(t), Lookup: func(k string) (string, bool) { return path, k == "PATH" }}
			wantRefusal(t, c.Check(context.Background(), "nvidia", tt.ids), tt.want)
		})
	}
}

// wantRefusal: want "" is a pass; else a refusal (75) saying want.
func wantRefusal(t *testing.T, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Fatalf("refused a clean GPU: %v", err)
		}
		return
	}
	if !IsRefused(err) || ExitCode(err) != 75 || !strings.Contains(err.Error(), want) {
		t.Errorf("err = %v, want a refusal (75) saying %q", err, want)
	}
}

func emptyKernelLog(t *testing.T) string {
	f := filepath.Join(t.TempDir(), "kmsg")
	os.WriteFile(f, nil, 0o644)
	return f
}

// TestGPUCheckXid: the machine's Xids since the last job (from the kernel
// log, by the GPU's PCI address) refuse the job; a program's own Xids (13,
// 31: a submission raises them at will), a neighbour's, and those before
// the last job do not; the first check sets the baseline.
func TestGPUCheckXid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		baseline string // the last job's kmsg sequence number; "" none
		id       string
		want     string
	}{
		{"a machine Xid since the last job", "1001", cleanUUID, "reported Xid 79 since the last job (NVRM: Xid (PCI:0000:3b:00): 79"},
		{"a neighbour's Xid 48 and a program's 31 since", "1003", cleanUUID, ""},
		{"the neighbour's own check sees its 48", "1003", otherUUID, "reported Xid 48"},
		{"seen by the last job", "1005", cleanUUID, ""},
		{"first check: baseline only", "", cleanUUID, ""},
		{"a reboot under a kept file", "99999", cleanUUID, "Xid 79"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := standInSMI(t, gpuRow(tt.id, "1", "0"), "")
			state := t.TempDir()
			if tt.baseline != "" {
				os.WriteFile(filepath.Join(state, "gpu-"+tt.id+".kmsg"), []byte(tt.baseline+"\n"), 0o644)
			}
			c := GPUCheck{StateDir: state, KernelLog: "testdata/kmsg/nvidia-xid.txt", Lookup: func(k string) (string, bool) { return path, k == "PATH" }}
			err := c.Check(context.Background(), "nvidia", []string{tt.id})
			wantRefusal(t, err, tt.want)
			if tt.want != "" && strings.Contains(err.Error(), "Xid 13") {
				t.Errorf("a program's Xid 13 counted: %v", err)
			}
			if b, _ := os.ReadFile(filepath.Join(state, "gpu-"+tt.id+".kmsg")); strings.TrimSpace(string(b)) != "1005" {
				t.Errorf("baseline after the check = %q, want the newest record 1005", b)
			}
		})
	}
}

// TestGPUCheckKernelLogUnreadable: where the agent may not read the
// kernel log (kernel.dmesg_restrict=1), or nvidia-smi cannot query the row
// remapper (an old driver), the check says so and the others still run.
func TestGPUCheckKernelLogUnreadable(t *testing.T) {
	t.Parallel()
	var logged []string
	path := standInSMI(t, gpuRow(cleanUUID, "30000", "0"), "")
	c := GPUCheck{StateDir: t.TempDir(), KernelLog: filepath.Join(t.TempDir(), "no-kmsg"),
		Lookup: func(k string) (string, bool) { return path, k == "PATH" },
		Logf:   func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}
	wantRefusal(t, c.Check(context.Background(), "nvidia", []string{cleanUUID}), "30000 MiB in use")
	for _, want := range []string{"Xid and GPU-reset reports not read", "row remapping not read: exit status 2: Invalid combination"} {
		if !strings.Contains(strings.Join(logged, "\n"), want) {
			t.Errorf("log %q does not say %q", logged, want)
		}
	}
}

// TestGPUCheckRecordsECC: the count a check sees is the next job's
// baseline, so an error is reported once, not on every job after it.
func TestGPUCheckRecordsECC(t *testing.T) {
	t.Parallel()
	state := t.TempDir()
	for i, want := range []bool{true, false} {
		path := standInSMI(t, gpuRow(cleanUUID, "1", "9"), "")
		os.WriteFile(filepath.Join(state, "gpu-"+cleanUUID+".ecc"), []byte(map[bool]string{true: "8", false: "9"}[i == 0]), 0o644)
		err := GPUCheck{StateDir: state, KernelLog: emptyKernelLog(t), Lookup: func(k string) (string, bool) { return path, k == "PATH" }}.Check(context.Background(), "nvidia", []string{cleanUUID})
		if (err != nil) != want {
			t.Errorf("check %d: %v, want refused %v", i, err, want)
		}
	}
}

// TestGPUCheckWithoutNvidiaSMI: a node without nvidia-smi logs that the
// check was skipped (docker --gpus fails there anyway).
func TestGPUCheckWithoutNvidiaSMI(t *testing.T) {
	t.Parallel()
	var logged string
	c := GPUCheck{StateDir: t.TempDir(), Lookup: func(k string) (string, bool) { return t.TempDir(), k == "PATH" },
		Logf: func(f string, a ...any) { logged = f }}
	if err := c.Check(context.Background(), "nvidia", []string{cleanUUID}); err != nil || !strings.Contains(logged, "skipped") {
		t.Errorf("err %v, log %q", err, logged)
	}
}

// amdSysfs is a stand-in sysfs of two AMD GPUs as amdgpu and KFD show
// them: renderD128 (PCI 0000:c1:00.0, KFD gpu_id 1111) and renderD136
// (0000:05:00.0, gpu_id 2222), idle; edit sets a file (relative to the
// root) to a value before the check.
func amdSysfs(t *testing.T, edit map[string]string) string {
	t.Helper()
	root := t.TempDir()
	files := map[string]string{
		"class/kfd/kfd/topology/nodes/0/properties": "cpu_cores_count 96\ndrm_render_minor 0\n",
		"class/kfd/kfd/topology/nodes/1/properties": "simd_count 1216\ndrm_render_minor 128\n",
		"class/kfd/kfd/topology/nodes/1/gpu_id":     "1111\n",
		"class/kfd/kfd/topology/nodes/2/properties": "simd_count 1216\ndrm_render_minor 136\n",
		"class/kfd/kfd/topology/nodes/2/gpu_id":     "2222\n",
	}
	for bus, dev := range map[string]string{"0000:c1:00.0": "renderD128", "0000:05:00.0": "renderD136"} {
		d := "devices/pci0000:00/" + bus + "/"
		files[d+"mem_info_vram_used"] = "12582912\n"
		files[d+"gpu_busy_percent"] = "0\n"
		files[d+"ras/umc_err_count"] = "ue: 0\nce: 4\n"
		must(t, os.MkdirAll(filepath.Join(root, "class/drm", dev), 0o755))
		must(t, os.MkdirAll(filepath.Join(root, d), 0o755))
		must(t, os.Symlink("../../../"+d, filepath.Join(root, "class/drm", dev, "device")))
	}
	for k, v := range edit {
		files[k] = v
	}
	for name, data := range files {
		must(t, os.MkdirAll(filepath.Dir(filepath.Join(root, name)), 0o755))
		must(t, os.WriteFile(filepath.Join(root, name), []byte(data), 0o644))
	}
	return root
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestGPUCheckAMD: an AMD GPU with a KFD queue of a process, VRAM in use,
// new uncorrectable RAS errors, busy with no queue, or a ring timeout in
// the kernel log since the last job refuses the job (75); the other
// GPU's state does not matter; a GPU gone from sysfs is refused.
func TestGPUCheckAMD(t *testing.T) {
	t.Parallel()
	const dev = "devices/pci0000:00/0000:c1:00.0/"
	tests := []struct {
		name string
		edit map[string]string
		ue   string // the last job's uncorrectable count
		id   string
		want string
	}{
		{"clean", nil, "", "renderD128", ""},
		{"a KFD queue of a foreign process", map[string]string{"class/kfd/kfd/proc/4242/queues/0/gpuid": "1111\n"}, "", "renderD128", "KFD queue of a process no job of this node owns (pid 4242"},
		{"a neighbour's queue", map[string]string{"class/kfd/kfd/proc/4242/queues/0/gpuid": "2222\n"}, "", "renderD128", ""},
		{"VRAM in use", map[string]string{dev + "mem_info_vram_used": "32212254720\n"}, "", "renderD128", "30720 MiB of VRAM in use"},
		{"busy with no queue", map[string]string{dev + "gpu_busy_percent": "100\n"}, "", "renderD128", "100% busy with no KFD queue"},
		{"new RAS errors", map[string]string{dev + "ras/umc_err_count": "ue: 3\nce: 9\n"}, "1", "renderD128", "2 new uncorrectable memory (RAS) error(s)"},
		{"off the bus", nil, "", "renderD200", "is not in sysfs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			if tt.ue != "" {
				os.WriteFile(filepath.Join(state, "gpu-"+tt.id+".ue"), []byte(tt.ue), 0o644)
			}
			c := GPUCheck{StateDir: state, Sysfs: amdSysfs(t, tt.edit), KernelLog: emptyKernelLog(t)}
			wantRefusal(t, c.Check(context.Background(), "rocm", []string{tt.id}), tt.want)
		})
	}
}

// TestGPUCheckAMDKernelLog: amdgpu's ring timeout for this GPU's PCI
// address since the last job refuses it; another GPU's reset does not.
func TestGPUCheckAMDKernelLog(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ id, want string }{
		{"renderD128", "ring comp_1.0.0 timeout"},
		{"renderD136", "GPU reset begin"},
	} {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			os.WriteFile(filepath.Join(state, "gpu-"+tt.id+".kmsg"), []byte("2001\n"), 0o644)
			c := GPUCheck{StateDir: state, Sysfs: amdSysfs(t, nil), KernelLog: "testdata/kmsg/amdgpu-timeout.txt"}
			err := c.Check(context.Background(), "rocm", []string{tt.id})
			wantRefusal(t, err, tt.want)
			if strings.Count(err.Error(), "logged since the last job") != 1 {
				t.Errorf("want exactly this GPU's line: %v", err)
			}
		})
	}
}

// TestGPUCheckReset: with reset allowed, a GPU that fails the check for
// a reason a reset may clear is reset (sudo -n, the command the node's
// sudoers line names) and checked again; a foreign process or a GPU off
// the bus is never reset; a refused or failed reset, or a GPU still
// dirty after it, is 75.
func TestGPUCheckReset(t *testing.T) {
	t.Parallel()
	dirty, clean := gpuRow(cleanUUID, "30000", "0"), gpuRow(cleanUUID, "1", "0")
	nvReset := "-n /usr/bin/nvidia-smi --gpu-reset -i " + cleanUUID
	tests := []struct {
		name, state, apps string
		after             string // the state the reset leaves; "" refuse
		reset             bool
		want, wantLog     string // wantLog: reset.log ("" none)
	}{
		{"memory in use, cleared by the reset", dirty, "", clean, true, "", nvReset},
		{"still dirty after the reset", dirty, "", dirty, true, "after a reset, GPU " + cleanUUID + " has 30000 MiB", nvReset},
		{"sudo refuses", dirty, "", "", true, "the reset failed: exit status 1: sudo: a password is required", nvReset},
		{"a foreign process is never reset", dirty, cleanUUID + ", 4242, python3, 480\n", clean, true, "not cleared by a reset", ""},
		{"off the bus is never reset", gpuRow(otherUUID, "1", "0"), "", clean, true, "not listed", ""},
		{"reset not allowed", dirty, "", clean, false, "30000 MiB in use", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := standInSMI(t, tt.state, tt.apps)
			if tt.after == "" {
				must(t, os.WriteFile(filepath.Join(path, "refuse"), nil, 0o644))
			} else {
				must(t, os.WriteFile(filepath.Join(path, "state-after.csv"), []byte(tt.after), 0o644))
				must(t, os.WriteFile(filepath.Join(path, "after"), []byte("mv \"$dir/state-after.csv\" \"$dir/state.csv\"\n"), 0o644))
			}
			var logged []string
			c := GPUCheck{StateDir: t.TempDir(), KernelLog: emptyKernelLog(t), Reset: tt.reset,
				Lookup: func(k string) (string, bool) { return path, k == "PATH" },
				Logf:   func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}
			wantRefusal(t, c.Check(context.Background(), "nvidia", []string{cleanUUID}), tt.want)
			resets, _ := os.ReadFile(filepath.Join(path, "reset.log"))
			if strings.TrimSpace(string(resets)) != tt.wantLog {
				t.Errorf("resets %q, want %q", resets, tt.wantLog)
			}
			if tt.wantLog != "" && !strings.Contains(strings.Join(logged, "\n"), "resetting it (KBGEN_GPU_RESET=1)") {
				t.Errorf("the job log does not say the GPU was reset: %q", logged)
			}
		})
	}
}

// TestGPUCheckResetRateLimited: a GPU is reset at most once every
// MinResetInterval, the time kept beside its lease: within it, a problem
// a reset would clear refuses the job and nothing is reset; after it, or
// with no reset on record, the GPU is reset and the time recorded.
func TestGPUCheckResetRateLimited(t *testing.T) {
	t.Parallel()
	dirty, clean := gpuRow(cleanUUID, "30000", "0"), gpuRow(cleanUUID, "1", "0")
	tests := []struct {
		name      string
		lastReset time.Duration // how long ago; 0: never
		want      string
		reset     bool
	}{
		{"never reset", 0, "", true},
		{"reset a minute ago", time.Minute, "GPU " + cleanUUID + " was reset 1m", false},
		{"reset just inside the interval", MinResetInterval - time.Minute, "ago, and is reset at most once every 15m0s", false},
		{"reset longer ago than the interval", MinResetInterval + time.Minute, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := standInSMI(t, dirty, "")
			must(t, os.WriteFile(filepath.Join(path, "state-after.csv"), []byte(clean), 0o644))
			must(t, os.WriteFile(filepath.Join(path, "after"), []byte("mv \"$dir/state-after.csv\" \"$dir/state.csv\"\n"), 0o644))
			state := t.TempDir()
			file := filepath.Join(state, "gpu-"+cleanUUID+".reset")
			if tt.lastReset != 0 {
				must(t, os.WriteFile(file, []byte(strconv.FormatInt(time.Now().Add(-tt.lastReset).Unix(), 10)+"\n"), 0o644))
			}
			c := GPUCheck{StateDir: state, KernelLog: emptyKernelLog(t), Reset: true, Lookup: func(k string) (string, bool) { return path, k == "PATH" }}
			wantRefusal(t, c.Check(context.Background(), "nvidia", []string{cleanUUID}), tt.want)
			_, err := os.Stat(filepath.Join(path, "reset.log"))
			if reset := err == nil; reset != tt.reset {
				t.Errorf("reset %v, want %v", reset, tt.reset)
			}
			b, _ := os.ReadFile(file)
			sec, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if recent := time.Since(time.Unix(sec, 0)) < time.Minute; recent != tt.reset {
				t.Errorf("%s holds %q: recorded now %v, want %v", file, b, recent, tt.reset)
			}
		})
	}
}

// TestGPUCheckResetAMD: an AMD GPU is reset by its PCI address with
// amd-smi, and passes when the reset cleared it; the "GPU reset" lines
// the reset itself logs are not taken for a new fault.
func TestGPUCheckResetAMD(t *testing.T) {
	t.Parallel()
	const used = "devices/pci0000:00/0000:c1:00.0/mem_info_vram_used"
	sys := amdSysfs(t, map[string]string{used: "32212254720\n"})
	path, klog := standInSMI(t, "", ""), emptyKernelLog(t)
	must(t, os.WriteFile(klog, []byte("6,1,1,-;amdgpu 0000:c1:00.0: amdgpu: SMU is initialized successfully!\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(path, "after"), []byte("echo 12582912 >"+filepath.Join(sys, used)+
		"\necho '3,2,2,-;amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!' >>"+klog+"\n"), 0o644))
	c := GPUCheck{StateDir: t.TempDir(), Sysfs: sys, KernelLog: klog, Reset: true,
		Lookup: func(k string) (string, bool) { return path, k == "PATH" }}
	wantRefusal(t, c.Check(context.Background(), "rocm", []string{"renderD128"}), "")
	resets, _ := os.ReadFile(filepath.Join(path, "reset.log"))
	if want := "-n /opt/rocm/bin/amd-smi reset -g 0000:c1:00.0 -G"; strings.TrimSpace(string(resets)) != want {
		t.Errorf("resets %q, want %q", resets, want)
	}
}

// TestJobRunRefusesADirtyGPU: kbgen sandbox checks its leased GPU before
// docker run; a dirty one means no container and exit 75.
func TestJobRunRefusesADirtyGPU(t *testing.T) {
	l, dir := fakeDocker(t)
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	env["PATH"] = standInSMI(t, gpuRow(cleanUUID, "1", "0"), cleanUUID+", 999, miner, 60000\n")
	host := fakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	_, err = j.Run(context.Background(), l, t.TempDir())
	if ExitCode(err) != 75 || !strings.Contains(err.Error(), "pid 999, miner") {
		t.Fatalf("dirty GPU: %v, want a refusal (75) naming the process", err)
	}
	if got := calls(t, dir); slices.ContainsFunc(got, func(c string) bool { return strings.HasPrefix(c, "run ") }) {
		t.Errorf("docker ran on a dirty GPU: %v", got)
	}
	if locked(t, filepath.Join(env[contract.EnvLeaseDir], "gpu-"+cleanUUID+".lock")) {
		t.Error("the refused job kept its lease")
	}
}

// TestJobRunRemovesStaleBeforeCheck: a container a SIGKILLed sandbox left
// on the leased GPU, its process still on it, is removed before the
// clean-GPU check (under the lease), so the check sees the GPU it freed
// and the job runs; the check is not skipped (a stand-in nvidia-smi
// answers it).
func TestJobRunRemovesStaleBeforeCheck(t *testing.T) {
	l, dir := fakeDocker(t)
	env := jobEnv(t)
	env["BUILDKITE_BUILD_PATH"] = t.TempDir()
	smi := standInSMI(t, gpuRow(cleanUUID, "1", "0"), cleanUUID+", 999, python3, 60000\n")
	env["PATH"] = smi
	touch(t, dir, "containers", "kbgen-leftover\t"+cleanUUID+"\n")
	touch(t, dir, "on-rm", ": >"+filepath.Join(smi, "apps.csv")+"\n")
	host := fakeHost(t, nil)
	j, err := NewJob(lookup(env), Request{Command: []string{"kbgen", "run"}, RunnerBinary: kbgenbin.Path(t), Host: &host})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := j.Run(context.Background(), l, t.TempDir()); err != nil {
		t.Fatalf("refused though the leftover holding the GPU was the sandbox's to remove: %v", err)
	}
	got := calls(t, dir)
	if len(got) < 3 || got[0] != "ps" || got[1] != "rm kbgen-leftover" || !strings.HasPrefix(got[2], "run ") {
		t.Errorf("docker calls = %q, want the leftover removed, then the run", got)
	}
	if log := l.Log.(*bytes.Buffer).String(); !strings.Contains(log, "removed stale container kbgen-leftover (left by a killed job on GPU "+cleanUUID) {
		t.Errorf("the removal is not in the job log: %q", log)
	}
}

// migUUID is a MIG instance of cleanUUID (migList), otherMIG one that
// nvidia-smi -L does not list.
const (
	migUUID  = "MIG-0e6c1111-5d4b-5a3c-9b2a-1f0e9d8c7b61"
	otherMIG = "MIG-0e6c9999-5d4b-5a3c-9b2a-1f0e9d8c7b69"
)

// migList is `nvidia-smi -L` of a GPU split into two MIG instances, as the
// driver prints it (node/testdata/h100x8/nvidia-smi-mig.txt's shape).
const migList = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + cleanUUID + ")\n" +
	"  MIG 3g.40gb     Device  0: (UUID: MIG-0e6c0000-5d4b-5a3c-9b2a-1f0e9d8c7b60)\n" +
	"  MIG 3g.40gb     Device  1: (UUID: " + migUUID + ")\n" +
	"GPU 1: NVIDIA H100 80GB HBM3 (UUID: " + otherUUID + ")\n"

// TestGPUCheckMIG: a MIG instance is judged by its GPU's faults since its
// agent's last job (ECC errors, Xids at the GPU's bus, row remaps), each
// counted under the instance's own baseline; a GPU busy with another
// instance's job is not a fault of this one (nvidia-smi reports processes
// and memory per GPU); an instance the driver no longer lists refuses;
// and no fault of a MIG instance's is ever cleared by a reset, which
// would end the other instances' jobs.
func TestGPUCheckMIG(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, state, apps, remaps, ecc, kmsg string // ecc: the instance's last count; kmsg: its last record
		id                                   string
		want                                 string // "" passes
	}{
		{"clean", gpuRow(cleanUUID, "1", "0"), "", "", "", "", migUUID, ""},
		{"the GPU busy with another instance's job", gpuRow(cleanUUID, "40000", "0"), cleanUUID + ", 4242, python3, 39000\n", "", "", "", migUUID, ""},
		{"new ECC errors on its GPU", gpuRow(cleanUUID, "1", "5"), "", "", "3", "", migUUID, "GPU " + migUUID + " on GPU " + cleanUUID + " has 2 new uncorrected ECC error(s)"},
		{"a row remap pending on its GPU", gpuRow(cleanUUID, "1", "0"), "", cleanUUID + ", Yes, No\n", "", "", migUUID, "on GPU " + cleanUUID + " has a row remap pending"},
		{"a machine Xid on its GPU's bus", gpuRow(cleanUUID, "1", "0"), "", "", "", "1001", migUUID, "on GPU " + cleanUUID + " reported Xid 79"},
		{"not listed any more", gpuRow(cleanUUID, "1", "0"), "", "", "", "", otherMIG, "is not listed by nvidia-smi -L"},
		{"its GPU off the bus", gpuRow(otherUUID, "1", "0"), "", "", "", "", migUUID, "which nvidia-smi does not list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := standInSMI(t, tt.state, tt.apps, tt.remaps)
			must(t, os.WriteFile(filepath.Join(path, "list.txt"), []byte(migList), 0o644))
			state := t.TempDir()
			if tt.ecc != "" {
				must(t, os.WriteFile(filepath.Join(state, "gpu-"+tt.id+".ecc"), []byte(tt.ecc), 0o644))
			}
			klog := emptyKernelLog(t)
			if tt.kmsg != "" {
				klog = "testdata/kmsg/nvidia-xid.txt"
				must(t, os.WriteFile(filepath.Join(state, "gpu-"+tt.id+".kmsg"), []byte(tt.kmsg+"\n"), 0o644))
			}
			c := GPUCheck{StateDir: state, KernelLog: klog, Reset: true, Lookup: func(k string) (string, bool) { return path, k == "PATH" }}
			err := c.Check(context.Background(), "nvidia", []string{tt.id})
			wantRefusal(t, err, tt.want)
			if tt.want != "" && !strings.Contains(err.Error(), "not cleared by a reset") {
				t.Errorf("a MIG instance's fault was reset (or tried): %v", err)
			}
		})
	}
}
