// Package serve is kbgen-nvml's side of package nvmlhelper: it loads NVML
// through go-nvml and answers the client's requests. It links go-nvml,
// which needs cgo, so only cmd/kbgen-nvml imports it; kbgen stays static.
package nvmlserve

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpu-mode/kbgen/nvmlhelper"
)

// maxRequest bounds one request line; a request names a few GPUs.
const maxRequest = 64 << 10

// handler answers requests with one loaded NVML.
type handler struct {
	lib nvml.Interface
	// xids watches for Xid events while serving; nil watches none.
	xids *xidWatch
	// procRoot is /proc, where a compute process's name is read.
	procRoot string
}

// Serve loads NVML through lib, says hello on w (the driver version, or
// why NVML did not load) and answers each request line read from r until
// r ends, when it unloads NVML.
func Serve(lib nvml.Interface, r io.Reader, w io.Writer) error {
	enc := json.NewEncoder(w)
	if ret := lib.Init(); ret != nvml.SUCCESS {
		err := fmt.Errorf("loading NVML: %v", ret)
		_ = enc.Encode(nvmlhelper.Reply{Error: err.Error()})
		return err
	}
	xids := watchXids(lib)
	// The job waits for the helper to exit: a watcher still blocked in
	// NVML's event wait is left to the process's end, and NVML with it.
	defer func() {
		if xids.close(xidCloseWait) {
			lib.Shutdown()
		}
	}()
	driver, ret := lib.SystemGetDriverVersion()
	if ret != nvml.SUCCESS {
		driver = "unknown"
	}
	if err := enc.Encode(nvmlhelper.Reply{Protocol: nvmlhelper.Protocol, Driver: driver}); err != nil {
		return err
	}
	s := &handler{lib: lib, xids: xids, procRoot: "/proc"}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxRequest)
	for sc.Scan() {
		if err := enc.Encode(s.answer(sc.Bytes())); err != nil {
			return err
		}
	}
	return sc.Err()
}

// WriteInventory loads NVML through lib and writes its inventory to w as
// indented JSON: the file `kbgen node plan --nvml-inventory` reads.
func WriteInventory(lib nvml.Interface, w io.Writer) error {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return fmt.Errorf("loading NVML: %w", ret)
	}
	defer lib.Shutdown()
	inv, err := (&handler{lib: lib, procRoot: "/proc"}).inventory()
	if err != nil {
		return err
	}
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(inv)
}

// answer is the reply to one request line.
func (s *handler) answer(line []byte) nvmlhelper.Reply {
	var req nvmlhelper.Request
	if err := json.Unmarshal(line, &req); err != nil {
		return nvmlhelper.Reply{Error: fmt.Sprintf("unreadable request: %v", err)}
	}
	switch req.Op {
	case nvmlhelper.OpSample:
		samples, err := s.samples(req.GPUs)
		if err != nil {
			return nvmlhelper.Reply{Error: err.Error()}
		}
		return nvmlhelper.Reply{Samples: samples}
	case nvmlhelper.OpInventory:
		inv, err := s.inventory()
		if err != nil {
			return nvmlhelper.Reply{Error: err.Error()}
		}
		return nvmlhelper.Reply{Inventory: inv}
	default:
		return nvmlhelper.Reply{Error: fmt.Sprintf("unknown op %q (want %s or %s)", req.Op, nvmlhelper.OpSample, nvmlhelper.OpInventory)}
	}
}

// devices resolves the GPUs a request names; none is every visible GPU.
func (s *handler) devices(names []string) ([]nvml.Device, error) {
	if len(names) == 0 {
		n, ret := s.lib.DeviceGetCount()
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("counting GPUs: %v", ret)
		}
		names = make([]string, n)
		for i := range names {
			names[i] = strconv.Itoa(i)
		}
	}
	out := make([]nvml.Device, 0, len(names))
	for _, name := range names {
		d, err := s.device(name)
		if err != nil {
			return nil, err
		}
		out = append(out, d)
	}
	return out, nil
}

// device is one GPU by UUID ("GPU-…", "MIG-…") or index.
func (s *handler) device(name string) (nvml.Device, error) {
	var d nvml.Device
	var ret nvml.Return
	if strings.HasPrefix(name, "GPU-") || strings.HasPrefix(name, "MIG-") {
		d, ret = s.lib.DeviceGetHandleByUUID(name)
	} else if i, err := strconv.Atoi(name); err == nil && i >= 0 {
		d, ret = s.lib.DeviceGetHandleByIndex(i)
	} else {
		return nil, fmt.Errorf("GPU %q is neither a UUID nor an index", name)
	}
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("GPU %s: %v", name, ret)
	}
	return d, nil
}

// busID is a PCI bus id as NVML writes it, a NUL-terminated C string.
func busID(p nvml.PciInfo) string {
	b := make([]byte, 0, len(p.BusId))
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b = append(b, byte(c))
	}
	return string(b)
}
