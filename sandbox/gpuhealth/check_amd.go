package gpuhealth

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/lazyre"
)

// amdBusyHung is the gpu_busy_percent at which a GPU with no KFD queue on
// it is taken for hung: an idle GPU reads 0, and nothing of this node's
// may run on a leased one.
const amdBusyHung = 90

// amdFault is what amdgpu logs for a GPU in a bad state, the whole record
// as the driver prints it: dev_err/dev_info on the device (the driver's
// name and the device's PCI address, then amdgpu.h's dev_fmt "amdgpu: ")
// and one of its fault messages at the start of the text: a ring timeout
// (amdgpu_job_timedout, amdgpu_job.c), a ring or GPU reset and its
// outcome (amdgpu_device_gpu_recover, amdgpu_device.c), MES not answering
// (mes_v11_0.c, mes_v12_0.c), a RAS uncorrectable error (amdgpu_ras.c):
//
//	amdgpu 0000:c1:00.0: amdgpu: ring gfx_0.0.0 timeout, signaled seq=1, emitted seq=2
//
// Anchored at the record's start, so a trap or segfault record naming a
// forged file or process does not count, nor the driver's own records
// that carry a process's name in their middle ("Process information:
// process … thread …", a page fault's "in process …"). A record without
// the device (DRM_ERROR's "[drm:amdgpu_job_timedout [amdgpu]] *ERROR*
// ring … timeout" of older kernels) names no GPU: it never counts.
var amdFault = lazyre.New(`^amdgpu ([0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]): amdgpu: (?:ring \S+ timeout|GPU reset begin!|GPU reset\([0-9]+\) (?:succeeded|failed)|GPU reset end with ret|GPU Recovery Failed|Ring \S+ reset (?:succeeded|failed)|MES failed to respond to msg=|(?:\{[0-9]+\})?(?:[0-9]+ )?uncorrectable hardware error)`)

// amdFaultsFor returns the driver's fault records for the device at bus
// (sysfs's "0000:c1:00.0"): kernel records only, in the grammar above, at
// exactly that bus.
func amdFaultsFor(records []KernelRecord, bus string) []KernelRecord {
	var out []KernelRecord
	for _, r := range records {
		if !driverRecord(r) {
			continue
		}
		if m := amdFault.FindStringSubmatch(r.Text); m != nil && m[1] == bus {
			out = append(out, r)
		}
	}
	return out
}

// amdProblems reads each leased render node (renderD128) from sysfs,
// which amdgpu and KFD make readable by every user: KFD's per-process
// queues, VRAM in use, uncorrectable RAS errors, gpu_busy_percent, and
// the kernel log where it can be read. Nothing here needs root or
// amd-smi.
func (c Check) amdProblems(ids []string) ([]gpuProblem, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	queues := c.kfdQueues()
	klog := c.kernelLog()
	var problems []gpuProblem
	for _, id := range ids {
		problems = append(problems, c.amdGPU(id, queues, klog)...)
	}
	return problems, nil
}

// amdGPU judges one render node.
func (c Check) amdGPU(id string, queues map[string][]string, klog []KernelRecord) []gpuProblem {
	dev := c.sys("class", "drm", id, "device")
	target, err := os.Readlink(dev)
	if err != nil {
		return []gpuProblem{{GPU: id, Broken: true, Msg: fmt.Sprintf("is not in sysfs (%s: fallen off the bus?)", printable(err.Error()))}}
	}
	bus := filepath.Base(target)
	var msgs []gpuProblem
	pids := queues[c.kfdGPUID(id)]
	for _, pid := range pids {
		msgs = append(msgs, gpuProblem{GPU: id, Foreign: true, Msg: fmt.Sprintf("has a KFD queue of a process no job of this node owns (pid %s, %s)", pid, printable(c.comm(pid)))})
	}
	if used, err := readInt(filepath.Join(dev, "mem_info_vram_used")); err == nil && used>>20 > MaxIdleUsedMiB {
		msgs = append(msgs, problem(id, "has %d MiB of VRAM in use before the job (at most %d)", used>>20, MaxIdleUsedMiB))
	}
	if busy, err := readInt(filepath.Join(dev, "gpu_busy_percent")); err == nil && busy >= amdBusyHung && len(pids) == 0 {
		msgs = append(msgs, problem(id, "is %d%% busy with no KFD queue on it (a hung queue?)", busy))
	}
	if n := c.newCount(id, "ue", rasUE(filepath.Join(dev, "ras", "umc_err_count"))); n > 0 {
		msgs = append(msgs, problem(id, "has %d new uncorrectable memory (RAS) error(s) since the last job", n))
	}
	if klog != nil {
		for _, r := range amdFaultsFor(kernelLogSince(klog, KernelLogFile(c.StateDir, id)), strings.ToLower(bus)) {
			msgs = append(msgs, problem(id, "logged since the last job: %s", printable(r.Text)))
		}
	}
	return msgs
}

// kfdQueues maps a KFD gpu_id to the processes that have a queue on it
// (/sys/class/kfd/kfd/proc/<pid>/queues/<qid>/gpuid).
func (c Check) kfdQueues() map[string][]string {
	out := map[string][]string{}
	files, _ := filepath.Glob(c.sys("class", "kfd", "kfd", "proc", "*", "queues", "*", "gpuid"))
	for _, f := range files {
		gpu, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid := filepath.Base(filepath.Dir(filepath.Dir(filepath.Dir(f))))
		g := strings.TrimSpace(string(gpu))
		if !slices.Contains(out[g], pid) {
			out[g] = append(out[g], pid)
		}
	}
	return out
}

// kfdGPUID finds the KFD topology node of a render node (its properties
// say drm_render_minor N) and returns its gpu_id.
func (c Check) kfdGPUID(id string) string {
	minor := strings.TrimPrefix(id, "renderD")
	nodes, _ := filepath.Glob(c.sys("class", "kfd", "kfd", "topology", "nodes", "*"))
	for _, n := range nodes {
		props, err := os.ReadFile(filepath.Join(n, "properties"))
		if err != nil || !strings.Contains("\n"+string(props), "\ndrm_render_minor "+minor+"\n") {
			continue
		}
		if g, err := os.ReadFile(filepath.Join(n, "gpu_id")); err == nil {
			return strings.TrimSpace(string(g))
		}
	}
	return ""
}

// rasUE is the "ue: N" line of amdgpu's umc_err_count ("" when absent:
// a GPU without RAS).
func rasUE(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "ue:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func (c Check) comm(pid string) string {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "comm"))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(b))
}

func (c Check) sys(elem ...string) string {
	root := c.Sysfs
	if root == "" {
		root = "/sys"
	}
	return filepath.Join(append([]string{root}, elem...)...)
}

func readInt(file string) (int64, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}
