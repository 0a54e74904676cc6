package gpuhealth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/sandbox/gpuhealth/gpuhealthtest"
)

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
		{"clean", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), "", "", "", []string{gpuhealthtest.CleanUUID}, ""},
		{"a neighbour's GPU busy", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0") + gpuhealthtest.GPURow(gpuhealthtest.OtherUUID, "70000", "3"), gpuhealthtest.OtherUUID + ", 4242, python3, 69000\n", "", "", []string{gpuhealthtest.CleanUUID}, ""},
		{"a foreign compute process", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "500", "0"), gpuhealthtest.CleanUUID + ", 4242, python3, 480\n", "", "", []string{gpuhealthtest.CleanUUID}, "compute process no job of this node owns (pid 4242, python3)"},
		{"memory in use", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "30000", "0"), "", "", "", []string{gpuhealthtest.CleanUUID}, "30000 MiB in use"},
		{"new ECC errors", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "5"), "", "", "3", []string{gpuhealthtest.CleanUUID}, "2 new uncorrected ECC error(s)"},
		{"the same ECC count", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "5"), "", "", "5", []string{gpuhealthtest.CleanUUID}, ""},
		{"no ECC on this GPU", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "[N/A]"), "", "", "", []string{gpuhealthtest.CleanUUID}, ""},
		{"a GPU off the bus", gpuhealthtest.GPURow(gpuhealthtest.OtherUUID, "1", "0"), "", "", "", []string{gpuhealthtest.CleanUUID}, "not listed by nvidia-smi"},
		{"one of a set dirty", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0") + gpuhealthtest.GPURow(gpuhealthtest.OtherUUID, "1", "0"), gpuhealthtest.OtherUUID + ", 7, x\x1b[31m, 1\n", "", "", []string{gpuhealthtest.CleanUUID, gpuhealthtest.OtherUUID}, "pid 7, x[31m"},
		{"a row remap pending", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), "", gpuhealthtest.CleanUUID + ", Yes, No\n", "", []string{gpuhealthtest.CleanUUID}, "row remap pending"},
		{"a row remap failed", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), "", gpuhealthtest.CleanUUID + ", No, Yes\n", "", []string{gpuhealthtest.CleanUUID}, "row remap fail"},
		{"no remap on a neighbour's", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), "", gpuhealthtest.CleanUUID + ", No, No\n" + gpuhealthtest.OtherUUID + ", Yes, No\n", "", []string{gpuhealthtest.CleanUUID}, ""},
		{"two problems, both said", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "30000", "0"), gpuhealthtest.CleanUUID + ", 4242, python3, 480\n", "", "", []string{gpuhealthtest.CleanUUID}, "(pid 4242, python3); GPU " + gpuhealthtest.CleanUUID + " has 30000 MiB"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var path string
			if tt.remaps != "" {
				path = gpuhealthtest.StandInSMI(t, tt.state, tt.apps, tt.remaps)
			} else {
				path = gpuhealthtest.StandInSMI(t, tt.state, tt.apps)
			}
			state := t.TempDir()
			if tt.ecc != "" {
				os.WriteFile(filepath.Join(state, "gpu-"+gpuhealthtest.CleanUUID+".ecc"), []byte(tt.ecc), 0o644)
			}
			c := Check{StateDir: state, KernelLog: emptyKernelLog(t), Path: path}
			gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "nvidia", tt.ids), tt.want)
		})
	}
}

// wantRefusal: want "" is a pass; else a refusal (75) saying want.
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
		{"a machine Xid since the last job", "1001", gpuhealthtest.CleanUUID, "reported Xid 79 since the last job (NVRM: Xid (PCI:0000:3b:00): 79"},
		{"a neighbour's Xid 48 and a program's 31 since", "1003", gpuhealthtest.CleanUUID, ""},
		{"the neighbour's own check sees its 48", "1003", gpuhealthtest.OtherUUID, "reported Xid 48"},
		{"seen by the last job", "1005", gpuhealthtest.CleanUUID, ""},
		{"first check: baseline only", "", gpuhealthtest.CleanUUID, ""},
		{"a reboot under a kept file", "99999", gpuhealthtest.CleanUUID, "Xid 79"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := gpuhealthtest.StandInSMI(t, gpuhealthtest.GPURow(tt.id, "1", "0"), "")
			state := t.TempDir()
			if tt.baseline != "" {
				os.WriteFile(filepath.Join(state, "gpu-"+tt.id+".kmsg"), []byte(tt.baseline+"\n"), 0o644)
			}
			c := Check{StateDir: state, KernelLog: "testdata/kmsg/nvidia-xid.txt", Path: path}
			err := c.Run(context.Background(), "nvidia", []string{tt.id})
			gpuhealthtest.WantRefusal(t, err, tt.want)
			// The message is the contract: the job log lists the Xids the operator must look at.
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
	path := gpuhealthtest.StandInSMI(t, gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "30000", "0"), "")
	c := Check{StateDir: t.TempDir(), KernelLog: filepath.Join(t.TempDir(), "no-kmsg"),
		Path: path,
		Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}
	gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "nvidia", []string{gpuhealthtest.CleanUUID}), "30000 MiB in use")
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
		path := gpuhealthtest.StandInSMI(t, gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "9"), "")
		os.WriteFile(filepath.Join(state, "gpu-"+gpuhealthtest.CleanUUID+".ecc"), []byte(map[bool]string{true: "8", false: "9"}[i == 0]), 0o644)
		err := Check{StateDir: state, KernelLog: emptyKernelLog(t), Path: path}.Run(context.Background(), "nvidia", []string{gpuhealthtest.CleanUUID})
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
	c := Check{StateDir: t.TempDir(), Path: t.TempDir(),
		Logf: func(f string, a ...any) { logged = f }}
	if err := c.Run(context.Background(), "nvidia", []string{gpuhealthtest.CleanUUID}); err != nil || !strings.Contains(logged, "skipped") {
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
			c := Check{StateDir: state, Sysfs: amdSysfs(t, tt.edit), KernelLog: emptyKernelLog(t)}
			gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "rocm", []string{tt.id}), tt.want)
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
			c := Check{StateDir: state, Sysfs: amdSysfs(t, nil), KernelLog: "testdata/kmsg/amdgpu-timeout.txt"}
			err := c.Run(context.Background(), "rocm", []string{tt.id})
			gpuhealthtest.WantRefusal(t, err, tt.want)
			// The message is the contract: the job log quotes each kernel log line the operator must look at.
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
	dirty, clean := gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "30000", "0"), gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0")
	nvReset := "-n /usr/bin/nvidia-smi --gpu-reset -i " + gpuhealthtest.CleanUUID
	tests := []struct {
		name, state, apps string
		after             string // the state the reset leaves; "" refuse
		reset             bool
		want, wantLog     string // wantLog: reset.log ("" none)
	}{
		{"memory in use, cleared by the reset", dirty, "", clean, true, "", nvReset},
		{"still dirty after the reset", dirty, "", dirty, true, "after a reset, GPU " + gpuhealthtest.CleanUUID + " has 30000 MiB", nvReset},
		{"sudo refuses", dirty, "", "", true, "the reset failed: exit status 1: sudo: a password is required", nvReset},
		{"a foreign process is never reset", dirty, gpuhealthtest.CleanUUID + ", 4242, python3, 480\n", clean, true, "not cleared by a reset", ""},
		{"off the bus is never reset", gpuhealthtest.GPURow(gpuhealthtest.OtherUUID, "1", "0"), "", clean, true, "not listed", ""},
		{"reset not allowed", dirty, "", clean, false, "30000 MiB in use", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := gpuhealthtest.StandInSMI(t, tt.state, tt.apps)
			if tt.after == "" {
				must(t, os.WriteFile(filepath.Join(path, "refuse"), nil, 0o644))
			} else {
				must(t, os.WriteFile(filepath.Join(path, "state-after.csv"), []byte(tt.after), 0o644))
				must(t, os.WriteFile(filepath.Join(path, "after"), []byte("mv \"$dir/state-after.csv\" \"$dir/state.csv\"\n"), 0o644))
			}
			var logged []string
			c := Check{StateDir: t.TempDir(), KernelLog: emptyKernelLog(t), Reset: tt.reset,
				Path: path,
				Logf: func(f string, a ...any) { logged = append(logged, fmt.Sprintf(f, a...)) }}
			gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "nvidia", []string{gpuhealthtest.CleanUUID}), tt.want)
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
	dirty, clean := gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "30000", "0"), gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0")
	tests := []struct {
		name      string
		lastReset time.Duration // how long ago; 0: never
		want      string
		reset     bool
	}{
		{"never reset", 0, "", true},
		{"reset a minute ago", time.Minute, "GPU " + gpuhealthtest.CleanUUID + " was reset 1m", false},
		{"reset just inside the interval", MinResetInterval - time.Minute, "ago, and is reset at most once every 15m0s", false},
		{"reset longer ago than the interval", MinResetInterval + time.Minute, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := gpuhealthtest.StandInSMI(t, dirty, "")
			must(t, os.WriteFile(filepath.Join(path, "state-after.csv"), []byte(clean), 0o644))
			must(t, os.WriteFile(filepath.Join(path, "after"), []byte("mv \"$dir/state-after.csv\" \"$dir/state.csv\"\n"), 0o644))
			state := t.TempDir()
			file := filepath.Join(state, "gpu-"+gpuhealthtest.CleanUUID+".reset")
			if tt.lastReset != 0 {
				must(t, os.WriteFile(file, []byte(strconv.FormatInt(time.Now().Add(-tt.lastReset).Unix(), 10)+"\n"), 0o644))
			}
			c := Check{StateDir: state, KernelLog: emptyKernelLog(t), Reset: true, Path: path}
			gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "nvidia", []string{gpuhealthtest.CleanUUID}), tt.want)
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
	path, klog := gpuhealthtest.StandInSMI(t, "", ""), emptyKernelLog(t)
	must(t, os.WriteFile(klog, []byte("6,1,1,-;amdgpu 0000:c1:00.0: amdgpu: SMU is initialized successfully!\n"), 0o644))
	must(t, os.WriteFile(filepath.Join(path, "after"), []byte("echo 12582912 >"+filepath.Join(sys, used)+
		"\necho '3,2,2,-;amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!' >>"+klog+"\n"), 0o644))
	c := Check{StateDir: t.TempDir(), Sysfs: sys, KernelLog: klog, Reset: true,
		Path: path}
	gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "rocm", []string{"renderD128"}), "")
	resets, _ := os.ReadFile(filepath.Join(path, "reset.log"))
	if want := "-n /opt/rocm/bin/amd-smi reset -g 0000:c1:00.0 -G"; strings.TrimSpace(string(resets)) != want {
		t.Errorf("resets %q, want %q", resets, want)
	}
}

// migUUID is a MIG instance of gpuhealthtest.CleanUUID (migList), otherMIG one that
// nvidia-smi -L does not list.
const (
	migUUID  = "MIG-0e6c1111-5d4b-5a3c-9b2a-1f0e9d8c7b61"
	otherMIG = "MIG-0e6c9999-5d4b-5a3c-9b2a-1f0e9d8c7b69"
)

// migList is `nvidia-smi -L` of a GPU split into two MIG instances, as the
// driver prints it (node/testdata/h100x8/nvidia-smi-mig.txt's shape).
const migList = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: " + gpuhealthtest.CleanUUID + ")\n" +
	"  MIG 3g.40gb     Device  0: (UUID: MIG-0e6c0000-5d4b-5a3c-9b2a-1f0e9d8c7b60)\n" +
	"  MIG 3g.40gb     Device  1: (UUID: " + migUUID + ")\n" +
	"GPU 1: NVIDIA H100 80GB HBM3 (UUID: " + gpuhealthtest.OtherUUID + ")\n"

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
		{"clean", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), "", "", "", "", migUUID, ""},
		{"the GPU busy with another instance's job", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "40000", "0"), gpuhealthtest.CleanUUID + ", 4242, python3, 39000\n", "", "", "", migUUID, ""},
		{"new ECC errors on its GPU", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "5"), "", "", "3", "", migUUID, "GPU " + migUUID + " on GPU " + gpuhealthtest.CleanUUID + " has 2 new uncorrected ECC error(s)"},
		{"a row remap pending on its GPU", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), "", gpuhealthtest.CleanUUID + ", Yes, No\n", "", "", migUUID, "on GPU " + gpuhealthtest.CleanUUID + " has a row remap pending"},
		{"a machine Xid on its GPU's bus", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), "", "", "", "1001", migUUID, "on GPU " + gpuhealthtest.CleanUUID + " reported Xid 79"},
		{"not listed any more", gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0"), "", "", "", "", otherMIG, "is not listed by nvidia-smi -L"},
		{"its GPU off the bus", gpuhealthtest.GPURow(gpuhealthtest.OtherUUID, "1", "0"), "", "", "", "", migUUID, "which nvidia-smi does not list"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			path := gpuhealthtest.StandInSMI(t, tt.state, tt.apps, tt.remaps)
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
			c := Check{StateDir: state, KernelLog: klog, Reset: true, Path: path}
			err := c.Run(context.Background(), "nvidia", []string{tt.id})
			gpuhealthtest.WantRefusal(t, err, tt.want)
			// The message is the contract: it tells the operator no reset was tried.
			if tt.want != "" && !strings.Contains(err.Error(), "not cleared by a reset") {
				t.Errorf("a MIG instance's fault was reset (or tried): %v", err)
			}
		})
	}
}
