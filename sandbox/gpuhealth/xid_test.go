package gpuhealth

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/sandbox/gpuhealth/gpuhealthtest"
)

// kmsgFixture reads testdata/kmsg/name as the check reads /dev/kmsg,
// keyed by sequence number.
func kmsgFixture(t *testing.T, name string) map[uint64]KernelRecord {
	t.Helper()
	recs, err := ReadKernelLog(filepath.Join("testdata", "kmsg", name))
	if err != nil {
		t.Fatal(err)
	}
	out := map[uint64]KernelRecord{}
	for _, r := range recs {
		out[r.Seq] = r
	}
	return out
}

// TestHostileKernelRecords: records a submission can cause or write that
// carry a driver's fault words (a trap or segfault naming a forged file or
// process, a user-space record, an audit record, a process name inside
// the driver's own record, another GPU's bus, a record naming no device)
// are never a fault of the GPU in question. Each record does hold the
// words at that GPU's bus, so a match anywhere in the text (the check
// before this test) would have counted it.
func TestHostileKernelRecords(t *testing.T) {
	t.Parallel()
	const nvBus, amdBus = "00000000:3B:00.0", "0000:c1:00.0"
	tests := []struct {
		name, file string
		seq        uint64
		amd        bool
		words      string // the forged words the record holds
	}{
		{"a trap in a file named as an Xid", "hostile-nvidia.txt", 3001, false, "NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x"},
		{"a segfault of a process named as an Xid", "hostile-nvidia.txt", 3002, false, "NVRM: Xid (PCI:0000:3b:00): 79"},
		{"a trap's continuation fragment", "hostile-nvidia.txt", 3003, false, "NVRM: Xid (PCI:0000:3b:00): 79"},
		{"an Xid written to /dev/kmsg (LOG_USER)", "hostile-nvidia.txt", 3004, false, "NVRM: Xid (PCI:0000:3b:00): 79"},
		{"an Xid sent through syslog (LOG_DAEMON)", "hostile-nvidia.txt", 3005, false, "NVRM: Xid (PCI:0000:3b:00): 48"},
		{"an audit record naming a forged path", "hostile-nvidia.txt", 3006, false, "NVRM: Xid (PCI:0000:3b:00): 79"},
		{"a program's Xid on another GPU, named as an Xid", "hostile-nvidia.txt", 3007, false, "NVRM: Xid (PCI:0000:3b:00): 79"},
		{"another GPU's machine Xid", "nvidia-xid.txt", 1004, false, "NVRM: Xid (PCI:0000:5e:00): 48"},
		{"amdgpu: a trap in a file named as a ring timeout", "hostile-amdgpu.txt", 4001, true, "amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 timeout"},
		{"amdgpu: a segfault of a process named as the device", "hostile-amdgpu.txt", 4002, true, "amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!"},
		{"amdgpu: a ring timeout written to /dev/kmsg", "hostile-amdgpu.txt", 4003, true, "amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 timeout"},
		{"amdgpu: a program's page fault", "hostile-amdgpu.txt", 4004, true, "amdgpu 0000:c1:00.0: amdgpu: "},
		{"amdgpu: the page fault's process named hang", "hostile-amdgpu.txt", 4005, true, "hang"},
		{"amdgpu: process information naming a timeout", "hostile-amdgpu.txt", 4006, true, "ring x timeout"},
		{"amdgpu: a timeout that names no device", "hostile-amdgpu.txt", 4007, true, "ring gfx timeout"},
		{"amdgpu: another GPU's ring timeout", "hostile-amdgpu.txt", 4008, true, "ring comp_1.0.0 timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, ok := kmsgFixture(t, tt.file)[tt.seq]
			if !ok {
				t.Fatalf("%s has no record %d", tt.file, tt.seq)
			}
			if !strings.Contains(r.Text, tt.words) {
				t.Fatalf("record %d does not hold %q: not the hostile case it names", tt.seq, tt.words)
			}
			if tt.amd {
				if got := amdFaultsFor([]KernelRecord{r}, amdBus); len(got) != 0 {
					t.Errorf("counted as GPU %s's fault: %q", amdBus, r.Text)
				}
				return
			}
			if got := xidsFor([]KernelRecord{r}, nvBus); len(got) != 0 {
				t.Errorf("counted as GPU %s's Xid %d: %q", nvBus, got[0].Code, r.Text)
			}
		})
	}
}

// TestDriverKernelRecords: what the drivers print for a machine fault, in
// each form they print it, counts for exactly that GPU.
func TestDriverKernelRecords(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, text, bus string
		amd             bool
		want            int // Xid code; for AMD 1 (counted) or 0
	}{
		{"Xid 79, no process", "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "00000000:3B:00.0", false, 79},
		{"Xid 109 of a process", "NVRM: Xid (PCI:0000:cb:00): 109, pid=1797828, name=pt_main_thread, Ch 00000008, errorString CTX SWITCH TIMEOUT, Info 0x58005", "00000000:CB:00.0", false, 109},
		{"Xid 48 on a MIG GPU instance", "NVRM: Xid (PCI:0000:3b:00 GPU-I:01 GPU-CI:00): 48, pid=77, name=python3, An uncorrectable double bit error", "00000000:3B:00.0", false, 48},
		{"a program's own Xid 13", "NVRM: Xid (PCI:0000:3b:00): 13, pid=77, name=python3, Graphics SM Warp Exception", "00000000:3B:00.0", false, 0},
		{"Xid 79 of another GPU", "NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.", "00000000:5E:00.0", false, 0},
		{"ring timeout", "amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2", "0000:c1:00.0", true, 1},
		{"soft-recovered ring timeout", "amdgpu 0000:c1:00.0: amdgpu: ring comp_1.0.0 timeout, but soft recovered", "0000:c1:00.0", true, 1},
		{"GPU reset", "amdgpu 0000:c1:00.0: amdgpu: GPU reset begin!", "0000:c1:00.0", true, 1},
		{"GPU reset failed", "amdgpu 0000:c1:00.0: amdgpu: GPU reset(2) failed", "0000:c1:00.0", true, 1},
		{"ring reset", "amdgpu 0000:c1:00.0: amdgpu: Ring gfx_0.0.0 reset succeeded", "0000:c1:00.0", true, 1},
		{"MES hang", "amdgpu 0000:c1:00.0: amdgpu: MES failed to respond to msg=REMOVE_QUEUE", "0000:c1:00.0", true, 1},
		{"RAS uncorrectable", "amdgpu 0000:c1:00.0: amdgpu: {3}2 uncorrectable hardware errors detected in umc block", "0000:c1:00.0", true, 1},
		{"a driver note", "amdgpu 0000:c1:00.0: amdgpu: SMU is initialized successfully!", "0000:c1:00.0", true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			rec := []KernelRecord{{Seq: 1, Text: tt.text, Facility: KernelFacility}}
			got := 0
			if tt.amd {
				got = len(amdFaultsFor(rec, tt.bus))
			} else if x := xidsFor(rec, tt.bus); len(x) == 1 {
				got = x[0].Code
			}
			if got != tt.want {
				t.Errorf("got %d, want %d", got, tt.want)
			}
		})
	}
}

// TestGPUCheckHostileKernelLog: the clean-GPU check over every hostile
// record since the last job passes, on the GPU the records name and on
// its neighbour, and resets nothing though resets are allowed.
func TestGPUCheckHostileKernelLog(t *testing.T) {
	t.Parallel()
	for _, id := range []string{gpuhealthtest.CleanUUID, gpuhealthtest.OtherUUID} {
		t.Run(id, func(t *testing.T) {
			t.Parallel()
			path := gpuhealthtest.StandInSMI(t, gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0")+gpuhealthtest.GPURow(gpuhealthtest.OtherUUID, "1", "0"), "")
			state := t.TempDir()
			must(t, os.WriteFile(filepath.Join(state, "gpu-"+id+".kmsg"), []byte("3000\n"), 0o644))
			c := Check{StateDir: state, KernelLog: "testdata/kmsg/hostile-nvidia.txt", Reset: true, Path: path}
			gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "nvidia", []string{id}), "")
			if b, err := os.ReadFile(filepath.Join(path, "reset.log")); err == nil {
				t.Errorf("a GPU was reset: %s", b)
			}
		})
	}
}

// TestGPUCheckHostileKernelLogAMD: the same for AMD: renderD128, whose bus
// every hostile record names, passes and is not reset (nor on the
// timeout that names no device: unattributable); renderD136 is refused
// for its own ring timeout alone.
func TestGPUCheckHostileKernelLogAMD(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ id, want string }{
		{"renderD128", ""},
		{"renderD136", "GPU renderD136 logged since the last job: amdgpu 0000:05:00.0: amdgpu: ring comp_1.0.0 timeout, signaled seq=3, emitted seq=4: not clean"},
	} {
		t.Run(tt.id, func(t *testing.T) {
			t.Parallel()
			state := t.TempDir()
			must(t, os.WriteFile(filepath.Join(state, "gpu-"+tt.id+".kmsg"), []byte("4000\n"), 0o644))
			// Resets allowed for the GPU that must pass: none may happen.
			path := gpuhealthtest.StandInSMI(t, "", "")
			c := Check{StateDir: state, Sysfs: amdSysfs(t, nil), KernelLog: "testdata/kmsg/hostile-amdgpu.txt", Reset: tt.want == "",
				Path: path}
			err := c.Run(context.Background(), "rocm", []string{tt.id})
			gpuhealthtest.WantRefusal(t, err, tt.want)
			// The message is the contract: the job log quotes the one kernel log line at fault.
			if err != nil && !strings.HasSuffix(err.Error(), "clean-GPU check: "+tt.want) {
				t.Errorf("refused for more than its own timeout: %v", err)
			}
			if b, err := os.ReadFile(filepath.Join(path, "reset.log")); err == nil {
				t.Errorf("a GPU was reset: %s", b)
			}
		})
	}
}
