package sandbox

import (
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
	"github.com/gpu-mode/kbgen/internal/xid"
)

// xidLine is the NVIDIA driver's Xid report in the kernel log:
// "NVRM: Xid (PCI:0000:3b:00): 79, pid=..., GPU has fallen off the bus."
// (older drivers write "(0000:03:00)" without "PCI:").
var xidLine = lazyre.New(`NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{4,8}):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})(?:\.[0-9a-fA-F])?\): ([0-9]+)`)

// xidReport is one Xid report.
type xidReport struct {
	Code int
	Text string
}

// xidsFor returns the machine's Xids (not xid.ByProgram's) that records hold
// for the GPU at busID (nvidia-smi's pci.bus_id, "00000000:3B:00.0").
func xidsFor(records []kmsgRecord, busID string) []xidReport {
	want := normalBus(busID)
	var out []xidReport
	for _, r := range records {
		m := xidLine.FindStringSubmatch(r.Text)
		if m == nil || normalBus(m[1]+":"+m[2]+":"+m[3]) != want {
			continue
		}
		code, err := strconv.Atoi(m[4])
		if err != nil || xid.ByProgram(code) {
			continue
		}
		out = append(out, xidReport{Code: code, Text: r.Text})
	}
	return out
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
