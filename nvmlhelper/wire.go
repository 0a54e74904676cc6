// Package nvmlhelper talks to kbgen-nvml, the helper that reads NVIDIA's
// management library (NVML) for kbgen: the noise record's GPU samples and
// the node's GPU inventory (GPUs, MIG instances, how each pair is linked).
//
// kbgen itself stays a static binary (the sandbox mounts it into images
// whose libc is not the host's, sandbox.CheckStatic), and a static binary
// cannot load libnvidia-ml.so. kbgen-nvml is the one dynamically linked
// piece: it loads NVML once and answers line-delimited JSON on its stdin
// and stdout for as long as its caller lives, so a sample costs a pipe
// round trip and a few NVML calls instead of an nvidia-smi process start
// (72-190 ms on an H100). Wherever it is missing or fails, callers fall
// back to nvidia-smi, which remains the reference.
//
// This package is pure Go: the wire types and the client. The helper's
// side, which links go-nvml and so needs cgo, is nvmlhelper/nvmlserve.
package nvmlhelper

// Protocol is the version of this wire format. The helper says it in its
// hello, and a client refuses a helper that speaks another: a node whose
// kbgen-nvml came from another release reads the GPU with nvidia-smi
// rather than misread the helper.
const Protocol = 1

// Ops a Request names.
const (
	// OpSample reads each GPU's clocks, clock-event reasons and counters,
	// temperature, power, ECC errors and compute processes.
	OpSample = "sample"
	// OpInventory lists the GPUs, their MIG instances and their links.
	OpInventory = "inventory"
)

// Request is one line the client writes.
type Request struct {
	Op string `json:"op"`
	// GPUs selects what a sample reads: UUIDs ("GPU-…", "MIG-…") or
	// indexes; none is every visible GPU.
	GPUs []string `json:"gpus,omitempty"`
}

// Reply is one line the helper writes: the first, unasked, is its hello
// (Protocol and Driver set once NVML is loaded, or Error when it cannot
// be), then one per Request.
type Reply struct {
	Error     string     `json:"error,omitempty"`
	Protocol  int        `json:"protocol,omitempty"`
	Driver    string     `json:"driver,omitempty"`
	Samples   []Sample   `json:"samples,omitempty"`
	Inventory *Inventory `json:"inventory,omitempty"`
}

// Sample is one GPU's reading, in nvidia-smi's units and names so the
// noise record reads the same whichever tool took it. A field the GPU or
// driver does not support is absent.
type Sample struct {
	UUID         string   `json:"uuid"`
	SMClockMHz   *float64 `json:"sm_clock_mhz,omitempty"`
	MemClockMHz  *float64 `json:"mem_clock_mhz,omitempty"`
	TemperatureC *float64 `json:"temperature_c,omitempty"`
	PowerW       *float64 `json:"power_w,omitempty"`
	// EventMask is nvmlClocksEventReasons (nvidia-smi's
	// clocks_event_reasons.active).
	EventMask *uint64 `json:"clock_event_mask,omitempty"`
	// EventCountersUS are the clock-event counters in microseconds, keyed
	// as nvidia-smi's clocks_event_reasons_counters.<name>.
	EventCountersUS map[string]float64 `json:"clock_event_counters_us,omitempty"`
	ECCUncorrected  *int64             `json:"ecc_uncorrected,omitempty"`
	Processes       []Process          `json:"processes,omitempty"`
	// Xids are the Xid critical errors NVML reported on this GPU since the
	// previous sample (the helper listens for them all along);
	// XidsUnwatched says why it could not listen.
	Xids          []int  `json:"xids,omitempty"`
	XidsUnwatched string `json:"xids_unwatched,omitempty"`
}

// Process is a compute process on a GPU. Its name is /proc/<pid>/comm as
// the helper sees it ("" when that pid is not in its namespace).
type Process struct {
	PID           int     `json:"pid"`
	Name          string  `json:"name,omitempty"`
	UsedMemoryMiB float64 `json:"used_memory_mib"`
}

// Inventory is what `kbgen node plan` reads of the GPUs.
type Inventory struct {
	Driver string   `json:"driver"`
	GPUs   []Device `json:"gpus"`
	// Links[i][j] is how GPUs[i] and GPUs[j] talk, in `nvidia-smi topo -m`'s
	// words: "X" on the diagonal, "NV<n>" over n NVLinks (to each other or
	// through NVSwitches), else PIX, PXB, PHB, NODE or SYS.
	Links [][]string `json:"links"`
}

// Device is one GPU.
type Device struct {
	Index int    `json:"index"`
	UUID  string `json:"uuid"`
	// PCIBus is NVML's bus id ("00000000:18:00.0"), as nvidia-smi prints it.
	PCIBus string `json:"pci_bus"`
	Name   string `json:"name"`
	// MIG are its MIG instances when MIG mode is on.
	MIG []MIGDevice `json:"mig,omitempty"`
}

// MIGDevice is one MIG instance.
type MIGDevice struct {
	Profile string `json:"profile"` // "1g.10gb"
	UUID    string `json:"uuid"`    // "MIG-…"
}
