package nvsmi

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// pciBDF is a PCI bus:device.function (hex; a function is 0-7).
var pciBDF = lazyre.New(`^[0-9a-f]{2}:[0-1][0-9a-f]\.[0-7]$`)

// ErrBusID is a PCI bus id that is not domain:bus:device.function.
var ErrBusID = errors.New("bad PCI bus id")

// BusID is nvidia-smi's pci.bus_id ("00000000:18:00.0", an eight-digit
// domain) in sysfs's form ("0000:18:00.0": four digits, lower case),
// which the node's plan records and sysfs is read by. Anything else is
// an error.
func BusID(s string) (string, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	dom, rest, ok := strings.Cut(s, ":")
	if !ok || !pciBDF.MatchString(rest) {
		return "", fmt.Errorf("%w %q", ErrBusID, s)
	}
	d, err := strconv.ParseUint(dom, 16, 32)
	if err != nil || d > 0xffff {
		return "", fmt.Errorf("%w %q", ErrBusID, s)
	}
	return fmt.Sprintf("%04x:%s", d, rest), nil
}

// BusKey is the domain, bus and device of a PCI address, whichever form
// it comes in: nvidia-smi's "00000000:3B:00.0", sysfs's "0000:3b:00.0"
// or the driver's Xid report's "0000:3b:00" all give "0000:3b:00". A
// string of another shape is returned lower-cased, so it matches only
// itself.
func BusKey(s string) string {
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
