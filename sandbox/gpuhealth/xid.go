package gpuhealth

import (
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
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
	want := normalBus(busID)
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

// normalBus makes nvidia-smi's "00000000:3B:00.0" and the driver's
// "0000:3b:00" one key: a four-digit domain, bus and device, lower case.
func normalBus(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	if i := strings.LastIndexByte(s, '.'); i > 0 {
		s = s[:i]
	}
	f := strings.Split(s, ":")
	if len(f) != 3 {
		return s
	}
	d := f[0]
	if len(d) > 4 {
		d = d[len(d)-4:]
	}
	return d + ":" + f[1] + ":" + f[2]
}
