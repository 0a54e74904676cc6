package sandbox

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/plugincfg"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/gpuhealth"
	"github.com/gpu-mode/kbgen/sandbox/gpuhealth/gpuhealthtest"
)

// forgedXidFile is the name of the file the hostile submission crashes
// in: the kernel's trap record names it, and it reads as the driver's
// "GPU has fallen off the bus" for the GPU at 3b (gpuhealthtest.CleanUUID).
const forgedXidFile = " NVRM: Xid (PCI:0000:3b:00): 79, pid=1, name=x, GPU has fallen off the bus."

// forgedTrapRecord is the record Linux prints for that crash: x86's
// do_trap → show_signal ("%s[%d] trap %s ip:%lx sp:%lx error:%lx" after
// traps.c's pr_fmt "traps: ", comm being the file's first 15 bytes) and
// mm/memory.c's print_vma_addr (" in %s[%lx+%lx]", the file's base name;
// 6.18 adds the offset). Recorded from this machine's kernel (6.18.44) for
// testdata/kmsg/hostile-nvidia.txt, where it is record 3001; used where
// the test cannot read the real kernel log.
const forgedTrapRecord = "traps:  NVRM: Xid (PCI[18796] trap invalid opcode ip:400078 sp:7ffe1bd83090 error:0 in " + forgedXidFile + "[78,400000+1000]"

// crashELF is a static executable for this machine whose one instruction
// is undefined (x86-64 ud2; arm64 udf #0): running it is SIGILL, and the
// kernel logs a trap naming the file. Nil where neither.
func crashELF() []byte {
	machine, code := map[string]uint16{"amd64": 62, "arm64": 183}[runtime.GOARCH], map[string][]byte{"amd64": {0x0f, 0x0b}, "arm64": {0, 0, 0, 0}}[runtime.GOARCH]
	if machine == 0 {
		return nil
	}
	const base, hdrs = 0x400000, 64 + 56
	le := binary.LittleEndian
	b := make([]byte, hdrs, hdrs+len(code))
	copy(b, "\x7fELF\x02\x01\x01") // 64-bit, little endian, ELF version 1
	le.PutUint16(b[16:], 2)        // ET_EXEC
	le.PutUint16(b[18:], machine)
	le.PutUint32(b[20:], 1)
	le.PutUint64(b[24:], base+hdrs) // entry: the code after the headers
	le.PutUint64(b[32:], 64)        // program headers right after this one
	le.PutUint16(b[52:], 64)
	le.PutUint16(b[54:], 56)
	le.PutUint16(b[56:], 1)
	ph := b[64:]
	le.PutUint32(ph[0:], 1) // PT_LOAD the whole file, read and execute
	le.PutUint32(ph[4:], 5)
	le.PutUint64(ph[16:], base)
	le.PutUint64(ph[24:], base)
	le.PutUint64(ph[32:], uint64(hdrs+len(code)))
	le.PutUint64(ph[40:], uint64(hdrs+len(code)))
	le.PutUint64(ph[48:], 0x1000)
	return append(b, code...)
}

// octal writes b for busybox printf.
func octal(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		fmt.Fprintf(&s, "\\%03o", c)
	}
	return s.String()
}

// TestHostileForgedXidCrash: a submission, in the sandbox's own container
// (uid 1000, no capabilities, no /dev/kmsg), runs a file named as an Xid
// 79 of GPU 3b and crashes in it, so the host kernel logs a trap record
// that holds the driver's words. The next clean-GPU check, with resets
// allowed, passes on that GPU and on its neighbour and resets nothing.
// Where this test may read the host's kernel log, the check reads the
// real record; elsewhere it reads the record Linux prints for the crash
// (forgedTrapRecord) and says so.
func TestHostileForgedXidCrash(t *testing.T) {
	elf := crashELF()
	if elf == nil {
		t.Skipf("no crashing executable written for %s", runtime.GOARCH)
	}
	klog, real := gpuhealth.DefaultKernelLog, true
	if _, err := gpuhealth.ReadKernelLog(gpuhealth.DefaultKernelLog); err != nil {
		klog, real = filepath.Join(t.TempDir(), "kmsg"), false
		must(t, os.WriteFile(klog, []byte("6,1,0,-;baseline\n"), 0o644))
		t.Logf("%s not readable here (%v): the check reads the kernel's documented record for the crash", gpuhealth.DefaultKernelLog, err)
	}
	path := gpuhealthtest.StandInSMI(t, gpuhealthtest.GPURow(gpuhealthtest.CleanUUID, "1", "0")+gpuhealthtest.GPURow(gpuhealthtest.OtherUUID, "1", "0"), "")
	state := t.TempDir()
	c := gpuhealth.Check{StateDir: state, KernelLog: klog, Reset: true, Path: path}
	ids := []string{gpuhealthtest.CleanUUID, gpuhealthtest.OtherUUID}
	for _, id := range ids { // the first check sets each GPU's baseline
		gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "nvidia", []string{id}), "")
	}
	since := newestSeq(t, klog)
	f := dockerargv.ContainerWorkDir + "/" + forgedXidFile
	script := fmt.Sprintf("printf '%s' > %q && chmod 755 %q && exec %q", octal(elf), f, f, f)
	r := runInSandbox(t, plugincfg.GPUDocker{GPUs: 1, CPUs: 1, Memory: "64m", ShmSize: "16m", PidsLimit: 64, Network: "none"}, script)
	if r.code != 128+4 {
		t.Fatalf("the container exited %d, want 132 (SIGILL in the forged file)\nstderr: %s", r.code, r.stderr)
	}
	if real && !waitForRecord(t, since, forgedXidFile) {
		t.Logf("the kernel logged no trap record for the crash (debug.exception-trace=0, or rate-limited): the check reads the kernel's documented record")
		klog, real = filepath.Join(t.TempDir(), "kmsg"), false
		must(t, os.WriteFile(klog, []byte("6,1,0,-;baseline\n"), 0o644))
		for _, id := range ids {
			must(t, os.WriteFile(gpuhealth.KernelLogFile(state, id), []byte("1\n"), 0o644))
		}
		c.KernelLog = klog
	}
	if !real {
		must(t, os.WriteFile(klog, []byte("6,1,0,-;baseline\n6,2,1,-;"+forgedTrapRecord+"\n"), 0o644))
	}
	for _, id := range ids {
		gpuhealthtest.WantRefusal(t, c.Run(context.Background(), "nvidia", []string{id}), "")
	}
	if b, err := os.ReadFile(filepath.Join(path, "reset.log")); err == nil {
		t.Errorf("a GPU was reset: %s", b)
	}
	t.Logf("checked against the real kernel log: %v", real)
}

// newestSeq is the sequence number of the newest record in the kernel log.
func newestSeq(t *testing.T, klog string) uint64 {
	t.Helper()
	recs, err := gpuhealth.ReadKernelLog(klog)
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, r := range recs {
		n = max(n, r.Seq)
	}
	return n
}

// waitForRecord waits a few seconds for a kernel log record after since
// holding s, and reports whether one came; it fails the test when that
// record does not hold the Xid at the bus the check judges (then it
// proves nothing).
func waitForRecord(t *testing.T, since uint64, s string) bool {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		recs, err := gpuhealth.ReadKernelLog(gpuhealth.DefaultKernelLog)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Seq > since && strings.Contains(r.Text, s) {
				t.Logf("the kernel logged: %q", r.Text)
				if !strings.Contains(r.Text, "NVRM: Xid (PCI:0000:3b:00): 79,") || r.Facility != gpuhealth.KernelFacility {
					t.Fatalf("the record does not carry the forged Xid as the kernel's: %+v", r)
				}
				return true
			}
		}
	}
	return false
}
