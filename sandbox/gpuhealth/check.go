package gpuhealth

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/nvsmi"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// MaxIdleUsedMiB is the most device memory a leased GPU may have in use
// before its job starts: an idle GPU holds next to nothing; more means a
// process the node does not know about, or a driver that leaked.
const MaxIdleUsedMiB = 2048

// gpuCheckTimeout bounds the nvidia-smi queries of one check.
const gpuCheckTimeout = 20 * time.Second

// Check is the clean-GPU check before every job, run while the job
// holds its GPUs' lease (so nothing of this node's may be on them).
type Check struct {
	// Path is the sandbox's PATH, where nvidia-smi and amd-smi are found;
	// "" looks them up as exec does.
	Path string
	// StateDir keeps each GPU's ECC count and last-read kernel log record
	// from the last check (gpu-<id>.ecc, gpu-<id>.kmsg, beside its lease).
	StateDir string
	// KernelLog is the kernel log device (DefaultKernelLog when empty).
	KernelLog string
	// Sysfs is where sysfs is mounted ("/sys" when empty): AMD GPUs are
	// read there.
	Sysfs string
	// Reset lets the check reset a GPU that fails it, then check again
	// (contract.EnvGPUReset).
	Reset bool
	// Logf reports a skipped check and a reset.
	Logf func(format string, args ...any)
}

// gpuProblem is why one GPU is not clean.
type gpuProblem struct {
	GPU string
	Msg string
	// Foreign: a process is on the GPU (a reset fails, and the process
	// is not the sandbox's to kill); Broken: a reset cannot help (the GPU
	// is off the bus, a row remap failed); Shared: a MIG instance's, whose
	// GPU other agents' instances share: never reset by one job.
	Foreign, Broken, Shared bool
}

// Run refuses (75: the machine's fault, Buildkite retries elsewhere) a
// job whose GPUs are not clean. NVIDIA: a compute process on one (the
// lease says no job of this node has it: a foreign or orphaned process),
// more than MaxIdleUsedMiB of memory in use, uncorrected ECC errors or
// the machine's Xid errors since the last job, a row remap pending or
// failed. AMD: a KFD queue of a process on it, memory in use, new
// uncorrectable RAS errors, a GPU reset or ring timeout in the kernel log
// since the last job. A MIG instance: its GPU's faults (ECC errors, Xids,
// row remaps: the GPU's bus and memory are the instance's), never a reset
// (other instances share the GPU); nvidia-smi's CSV queries report
// processes and memory per GPU, not per instance, so those are not judged
// (docs/isolation.md). A node without nvidia-smi is logged and passes,
// since docker --gpus fails there anyway.
func (c Check) Run(ctx context.Context, rt string, ids []string) error {
	problems, err := c.problems(ctx, rt, ids)
	if err != nil || len(problems) == 0 {
		return err
	}
	if !c.Reset {
		return refusal.Refusef("clean-GPU check: %s", describeProblems(problems))
	}
	if err := c.resetAll(ctx, rt, problems); err != nil {
		return err
	}
	c.skipKernelLog(ids)
	if problems, err = c.problems(ctx, rt, ids); err != nil || len(problems) == 0 {
		return err
	}
	return refusal.Refusef("clean-GPU check: after a reset, %s", describeProblems(problems))
}

// problems is one pass over the GPUs of a runtime, bounded by
// gpuCheckTimeout (a reset between two passes has its own bound).
func (c Check) problems(ctx context.Context, rt string, ids []string) ([]gpuProblem, error) {
	ctx, cancel := context.WithTimeout(ctx, gpuCheckTimeout)
	defer cancel()
	switch rt {
	case string(contract.RuntimeNVIDIA):
		return c.nvidiaProblems(ctx, ids)
	case string(contract.RuntimeROCm):
		return c.amdProblems(ids)
	}
	return nil, nil
}

// describeProblems is the refusal's text: every problem, GPU by GPU.
func describeProblems(problems []gpuProblem) string {
	msgs := make([]string, len(problems))
	for i, p := range problems {
		msgs[i] = "GPU " + p.GPU + " " + p.Msg
	}
	return strings.Join(msgs, "; ") + ": not clean"
}

// nvidiaProblems reads the leased GPUs and MIG instances with nvidia-smi
// and the kernel log.
func (c Check) nvidiaProblems(ctx context.Context, ids []string) ([]gpuProblem, error) {
	var gpus, migs []string
	for _, id := range ids {
		switch {
		case strings.HasPrefix(id, "GPU-"):
			gpus = append(gpus, id)
		case strings.HasPrefix(id, "MIG-"):
			migs = append(migs, id)
		}
	}
	if len(gpus)+len(migs) == 0 {
		return nil, nil
	}
	q, err := c.nvidiaQueries(ctx, len(migs) > 0)
	if errors.Is(err, exec.ErrNotFound) {
		c.logf("kbgen sandbox: clean-GPU check skipped: nvidia-smi is not on PATH")
		return nil, nil
	}
	if err != nil {
		return nil, refusal.Refusef("clean-GPU check: nvidia-smi: %v", err)
	}
	if q.remapErr != nil {
		c.logf("kbgen sandbox: clean-GPU check: row remapping not read: %v", q.remapErr)
	}
	klog := c.kernelLog()
	rows, procs := nvsmi.Rows(q.state, 4), nvsmi.Rows(q.apps, 4)
	var problems []gpuProblem
	for _, id := range gpus {
		problems = append(problems, c.nvidiaGPU(id, rows[id], procs[id], q.remaps[id], klog)...)
	}
	parents := migParents(q.list)
	for _, id := range migs {
		problems = append(problems, c.nvidiaMIG(id, parents[id], rows, q.remaps, klog)...)
	}
	return problems, nil
}

// migParents maps each MIG instance `nvidia-smi -L` lists to its GPU.
func migParents(list []byte) map[string]string {
	parents := map[string]string{}
	migs, _ := nvsmi.ParseMIG(list)
	for _, insts := range migs {
		for _, m := range insts {
			parents[m.UUID] = m.Parent
		}
	}
	return parents
}

// smiAnswers are nvidia-smi's answers to the check's three queries.
type smiAnswers struct {
	state, apps []byte
	// list is `nvidia-smi -L`, read only when a MIG instance is leased.
	list   []byte
	remaps map[string][]string
	// remapErr: the row remapper could not be read (an older GPU or
	// driver); logged, not judged.
	remapErr error
}

// nvidiaQueries runs the queries at once: each nvidia-smi start costs
// tens of milliseconds (~80 ms on an H100, docs/performance.md). withList
// adds `nvidia-smi -L`, which maps a MIG instance to its GPU.
func (c Check) nvidiaQueries(ctx context.Context, withList bool) (smiAnswers, error) {
	var q smiAnswers
	var appsErr, listErr error
	var wg sync.WaitGroup
	wg.Go(func() {
		q.apps, appsErr = c.tool(ctx, "nvidia-smi", nvsmi.AppsArgs...)
	})
	wg.Go(func() { q.remaps, q.remapErr = c.remappedRows(ctx) })
	if withList {
		wg.Go(func() { q.list, listErr = c.tool(ctx, "nvidia-smi", nvsmi.ListArgs...) })
	}
	state, err := c.tool(ctx, "nvidia-smi", nvsmi.HealthArgs...)
	wg.Wait()
	q.state = state
	return q, errors.Join(err, appsErr, listErr)
}

// nvidiaGPU judges one GPU from its rows (nil: not listed). Every state
// is read and recorded even when an earlier one already fails, so the
// next job's baselines are today's.
func (c Check) nvidiaGPU(id string, row, proc, remap []string, klog []KernelRecord) []gpuProblem {
	if row == nil {
		return []gpuProblem{{GPU: id, Msg: "is not listed by nvidia-smi (fallen off the bus?)", Broken: true}}
	}
	var msgs []gpuProblem
	if proc != nil {
		msgs = append(msgs, gpuProblem{GPU: id, Foreign: true, Msg: fmt.Sprintf("runs a compute process no job of this node owns (pid %s, %s)", proc[1], printable(proc[2]))})
	}
	if used, err := strconv.Atoi(row[2]); err == nil && used > MaxIdleUsedMiB {
		msgs = append(msgs, problem(id, "has %d MiB in use before the job (at most %d)", used, MaxIdleUsedMiB))
	}
	return append(msgs, c.gpuFaults(id, "", row, remap, klog)...)
}

// nvidiaMIG judges a MIG instance by its GPU (parent, "" when `nvidia-smi
// -L` does not list the instance): the GPU's faults since this agent's
// last job, each baseline kept under the instance's id (its agent's own).
// Every problem is Shared: resetting the GPU would end its other
// instances' jobs.
func (c Check) nvidiaMIG(id, parent string, rows, remaps map[string][]string, klog []KernelRecord) []gpuProblem {
	if parent == "" {
		return []gpuProblem{{GPU: id, Broken: true, Shared: true, Msg: "is not listed by nvidia-smi -L (MIG turned off, or the instance destroyed?)"}}
	}
	if rows[parent] == nil {
		return []gpuProblem{{GPU: id, Broken: true, Shared: true, Msg: "is on GPU " + parent + ", which nvidia-smi does not list (fallen off the bus?)"}}
	}
	msgs := c.gpuFaults(id, "on GPU "+parent+" ", rows[parent], remaps[parent], klog)
	for i := range msgs {
		msgs[i].Shared = true
	}
	return msgs
}

// gpuFaults are a GPU's faults since the last job of id (the GPU, or a MIG
// instance on it, whose message says "on GPU …" first: on): new
// uncorrected ECC errors, the machine's Xids at its bus address, a row
// remap pending or failed. Each baseline is read and recorded even when
// an earlier fault already fails, so the next job's are today's.
func (c Check) gpuFaults(id, on string, row, remap []string, klog []KernelRecord) []gpuProblem {
	var msgs []gpuProblem
	if n := c.newCount(id, "ecc", row[3]); n > 0 {
		msgs = append(msgs, problem(id, "%shas %d new uncorrected ECC error(s) since the last job", on, n))
	}
	if klog != nil {
		for _, x := range xidsFor(kernelLogSince(klog, KernelLogFile(c.StateDir, id)), row[1]) {
			msgs = append(msgs, problem(id, "%sreported Xid %d since the last job (%s)", on, x.Code, printable(x.Text)))
		}
	}
	if remap != nil && isYes(remap[1]) {
		msgs = append(msgs, problem(id, "%shas a row remap pending: it needs a reset", on))
	}
	if remap != nil && isYes(remap[2]) {
		msgs = append(msgs, gpuProblem{GPU: id, Broken: true, Msg: on + "has had a row remap fail: its memory needs repair"})
	}
	return msgs
}

// remappedRows reads the row remapper (Ampere and later); an older GPU
// or driver that cannot answer is an error the caller logs, not judges.
func (c Check) remappedRows(ctx context.Context) (map[string][]string, error) {
	out, err := c.tool(ctx, "nvidia-smi", nvsmi.RemappedRowsArgs...)
	if err != nil {
		return nil, err
	}
	return nvsmi.Rows(out, 3), nil
}

func (c Check) kernelLogPath() string {
	if c.KernelLog == "" {
		return DefaultKernelLog
	}
	return c.KernelLog
}

// kernelLog reads the kernel log for Xid reports; where this user may not
// read it (kernel.dmesg_restrict=1 without CAP_SYSLOG) it says so and
// returns nil: the other checks still run.
func (c Check) kernelLog() []KernelRecord {
	records, err := ReadKernelLog(c.kernelLogPath())
	if err != nil {
		c.logf("kbgen sandbox: clean-GPU check: Xid and GPU-reset reports not read: %v (kernel.dmesg_restrict=1? docs/isolation.md)", err)
		return nil
	}
	if records == nil {
		records = []KernelRecord{}
	}
	return records
}

// problem is a resettable problem of GPU id.
func problem(id, format string, args ...any) gpuProblem {
	return gpuProblem{GPU: id, Msg: fmt.Sprintf(format, args...)}
}

// skipKernelLog moves each GPU's kernel log baseline to now: what the
// reset just logged ("GPU reset begin!") is not a new fault. A reset that
// failed has already refused the job.
func (c Check) skipKernelLog(ids []string) {
	records, err := ReadKernelLog(c.kernelLogPath())
	if err != nil {
		return
	}
	for _, id := range ids {
		kernelLogSince(records, KernelLogFile(c.StateDir, id))
	}
}

func isYes(s string) bool {
	s = strings.ToLower(strings.TrimSpace(s))
	return s == "yes" || s == "1"
}

// newCount compares a GPU's error counter with the last job's (kept in
// gpu-<id>.<kind>) and records it: how many are new; a value that is not
// a number ("[N/A]": no ECC) is 0.
func (c Check) newCount(id, kind, value string) int64 {
	n, err := strconv.ParseInt(strings.TrimSpace(value), 10, 64)
	if err != nil {
		return 0
	}
	file := filepath.Join(c.StateDir, "gpu-"+id+"."+kind)
	prev, rerr := os.ReadFile(file)
	_ = os.WriteFile(file, []byte(strconv.FormatInt(n, 10)+"\n"), 0o660)
	if rerr != nil {
		return 0
	}
	p, err := strconv.ParseInt(strings.TrimSpace(string(prev)), 10, 64)
	if err != nil || n <= p {
		return 0
	}
	return n - p
}

// tool runs a program found on the sandbox's PATH: its stdout, or an
// error with the first line of its stderr.
func (c Check) tool(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := name
	if c.Path != "" {
		found := ""
		for _, d := range filepath.SplitList(c.Path) {
			if st, err := os.Stat(filepath.Join(d, path)); err == nil && st.Mode().IsRegular() && st.Mode()&0o111 != 0 {
				found = filepath.Join(d, path)
				break
			}
		}
		if found == "" {
			return nil, exec.ErrNotFound
		}
		path = found
	}
	cmd := exec.CommandContext(ctx, path, args...)
	out, err := cmd.Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil, fmt.Errorf("%v: %s", err, printable(firstLineOf(string(ee.Stderr))))
	}
	return out, err
}

func (c Check) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

// printable keeps a tool's text to one short printable line.
func printable(s string) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, s)
	if len(s) > 120 {
		s = s[:120]
	}
	return s
}
