package nvsmi

import (
	"strconv"
	"strings"
)

// The queries kbgen asks nvidia-smi, each once. The CSV forms have no
// header; nounits leaves numbers bare (MiB, MHz, W).
var (
	// InventoryArgs lists a node's GPUs for its plan (ParseNvidiaSMI in
	// node: index, uuid, pci.bus_id, name); vendors run the same command
	// to make a `kbgen node plan --nvidia-smi` fixture.
	InventoryArgs = []string{"--query-gpu=index,uuid,pci.bus_id,name", "--format=csv,noheader"}
	// NameArgs names the GPUs the runner sees (its system info).
	NameArgs = []string{"--query-gpu=name", "--format=csv,noheader"}
	// HealthArgs is the clean-GPU check's state of every GPU (Rows of 4:
	// uuid, pci.bus_id, memory.used, ecc.errors.uncorrected.volatile.total).
	HealthArgs = QueryGPU("uuid", "pci.bus_id", "memory.used", "ecc.errors.uncorrected.volatile.total")
	// AppsArgs lists the compute processes on every GPU (ParseApps, or
	// Rows of 4: gpu_uuid, pid, process_name, used_memory).
	AppsArgs = []string{"--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits"}
	// RemappedRowsArgs is each GPU's row remapper (Rows of 3: gpu_uuid,
	// remapped_rows.pending, remapped_rows.failure); drivers before R460
	// refuse it.
	RemappedRowsArgs = []string{"--query-remapped-rows=gpu_uuid,remapped_rows.pending,remapped_rows.failure", "--format=csv,noheader,nounits"}
	// PowerLimitArgs is each GPU's software power limit in watts
	// (PowerLimits): nvidia-smi --help-query-gpu, "power.limit: The
	// software power limit in watts. Set by software like nvidia-smi."
	// An administrator's `nvidia-smi -pl` changes it, and with it a
	// kernel's speed.
	PowerLimitArgs = QueryGPU("uuid", "power.limit")
)

// PowerLimits is PowerLimitArgs' answer: watts by GPU UUID. A GPU that
// reports none ("[N/A]", "[Not Supported]") or a number that is not one
// (negative, not finite) is left out.
func PowerLimits(out []byte) map[string]float64 {
	w := map[string]float64{}
	for uuid, f := range Rows(out, 2) {
		if v, err := strconv.ParseFloat(f[1], 64); err == nil && v > 0 && v < 1e6 {
			w[uuid] = v
		}
	}
	return w
}

// QueryGPU is `--query-gpu` of fields as bare CSV.
func QueryGPU(fields ...string) []string {
	return []string{"--query-gpu=" + strings.Join(fields, ","), "--format=csv,noheader,nounits"}
}

// Fields splits one CSV line into its fields, trimmed. nvidia-smi quotes
// nothing: a field never holds a comma, except a GPU's name when it is
// the last one asked for (see SplitN in node's inventory parser).
func Fields(line string) []string {
	f := strings.Split(strings.TrimSpace(line), ",")
	for i := range f {
		f[i] = strings.TrimSpace(f[i])
	}
	return f
}

// Rows keys the CSV lines of n fields by their first field (a GPU's
// UUID); a line of another width is skipped, and of two lines with one
// key the last stays.
func Rows(out []byte, n int) map[string][]string {
	rows := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		if f := Fields(line); len(f) == n {
			rows[f[0]] = f
		}
	}
	return rows
}

// App is one compute process as AppsArgs lists it.
type App struct {
	GPU     string // the GPU's UUID
	PID     int
	Name    string
	UsedMiB float64
}

// ParseApps reads AppsArgs' CSV, the processes on GPU gpu ("" for all);
// a line that is not a process (a PID that is not a number) is skipped.
func ParseApps(out []byte, gpu string) []App {
	var apps []App
	for line := range strings.Lines(string(out)) {
		f := Fields(line)
		if len(f) != 4 || (gpu != "" && f[0] != gpu) {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			continue
		}
		mem, _ := strconv.ParseFloat(f[3], 64)
		apps = append(apps, App{GPU: f[0], PID: pid, Name: f[2], UsedMiB: mem})
	}
	return apps
}
