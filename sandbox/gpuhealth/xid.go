package gpuhealth

import (
	"strconv"

	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/internal/xid"
)

// xidLine is the NVIDIA driver's Xid report, the whole record as the
// driver prints it (krcReportXid, src/nvidia/src/kernel/gpu/rc/kernel_rc.c
// in NVIDIA/open-gpu-kernel-modules):
//
//	NVRM: Xid (PCI:%04x:%02x:%02x): %d, pid=%s, name=%s, <message>
//
// pid is a number or '<unknown>'; on a MIG GPU the parenthesis also holds
// " GPU-I:%02u" and " GPU-CI:%02u". Anchored at the record's start: the
// kernel prints other records that carry a submission's words in their
// middle (a trap names the file that crashed, a segfault the process),
// and a record that merely contains an Xid is not the driver's.
var xidLine = lazyre.New(`^NVRM: Xid \(PCI:([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2})(?: GPU-I:[0-9]+)?(?: GPU-CI:[0-9]+)?\): ([0-9]+), pid=(?:[0-9]+|'<unknown>'), name=`)

// xidReport is one Xid report.
type xidReport struct {
	Code int
	Text string
}

// xidsFor returns the machine's Xids (not xid.ByProgram's) that the driver
// reported for the GPU at busID (nvidia-smi's pci.bus_id,
// "00000000:3B:00.0"): kernel records only (driverRecord), in the driver's
// grammar, at exactly that bus.
func xidsFor(records []KernelRecord, busID string) []xidReport {
	want := nvsmi.BusKey(busID)
	var out []xidReport
	for _, r := range records {
		if !driverRecord(r) {
			continue
		}
		m := xidLine.FindStringSubmatch(r.Text)
		if m == nil || m[1] != want {
			continue
		}
		code, err := strconv.Atoi(m[2])
		if err != nil || xid.ByProgram(code) {
			continue
		}
		out = append(out, xidReport{Code: code, Text: r.Text})
	}
	return out
}

// driverRecord: the kernel printed r (LOG_KERN). What user space writes
// into the kernel log never has facility 0 (KernelRecord.Facility).
func driverRecord(r KernelRecord) bool {
	return r.Facility == KernelFacility
}
