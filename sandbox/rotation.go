package sandbox

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// FaultLimit is how many machine faults (exit 75) in a row take an agent
// out of rotation until its GPUs pass the clean-GPU check: one 75 may be
// a passing hiccup (the agent is back after its unit's 60 s cool-down);
// three in a row is a machine that keeps failing jobs.
const FaultLimit = 3

// readmitLeaseWait is how long `kbgen node check-gpu` waits for the
// agent's GPUs: another agent's job may hold them (a multi-GPU agent
// shares them); the unit tries again a minute later.
const readmitLeaseWait = 10 * time.Second

// faultFile counts an agent's machine faults in a row, beside the GPU
// leases: one file per GPU set (an agent's), named so an operator can
// tell whose it is.
func faultFile(dir string, ids []string) string {
	return filepath.Join(dir, fmt.Sprintf("faults-%s-x%d", ids[0], len(ids)))
}

// RecordExit counts the job's exit for its agent: a 75 adds one fault, any
// other exit ends the row. At FaultLimit it returns what the job log
// should say: the agent now stays out of rotation until its GPUs pass
// the check. A job without GPUs is not counted, nor one that waited out
// the lease (the node was busy; taking a multi-GPU agent out for that
// would starve it).
func (j *Job) RecordExit(code int) string {
	if len(j.Spec.GPUs) == 0 || j.leaseBusy {
		return ""
	}
	file := faultFile(j.lease.Dir, j.Spec.GPUs)
	if code != exitcode.TempFail {
		_ = os.Remove(file)
		return ""
	}
	n := readFaults(file) + 1
	_ = os.WriteFile(file, []byte(strconv.Itoa(n)+"\n"), 0o660)
	if n < FaultLimit {
		return ""
	}
	return fmt.Sprintf("this agent's machine fault %d in a row (limit %d): it stays out of rotation until its GPUs pass the clean-GPU check (kbgen node check-gpu --if-out, run by its unit before every start; systemd tries again every 60 s)", n, FaultLimit)
}

func readFaults(file string) int {
	b, err := os.ReadFile(file)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// Readmission is what `kbgen node check-gpu` found.
type Readmission struct {
	// GPUs are the agent's, from its placement.
	GPUs []string
	// Faults is the agent's count of machine faults in a row.
	Faults int
	// Checked: the clean-GPU check ran and passed (the count is now 0);
	// false when ifOut was asked and the agent was not out.
	Checked bool
}

// Readmit is `kbgen node check-gpu`: the clean-GPU check of the agent
// whose placement lookup holds (its unit's environment), under the GPU
// lease, with a reset where the node allows it. Passed, the agent's fault
// count is cleared: it is back in rotation. With ifOut (the unit's
// ExecStartPre) it checks only an agent FaultLimit faults in a row took
// out; any other starts at once. A GPU that fails, or is leased to
// another job, is a RefusedError (75): the unit does not start, and
// systemd tries again after RestartSec.
// logf reports the lease wait, a skipped check and a reset.
func Readmit(ctx context.Context, lookup func(string) (string, bool), ifOut bool, logf func(string, ...any)) (Readmission, error) {
	rt, ids := placementGPUs(lookup)
	if len(ids) == 0 {
		return Readmission{}, refusef("this agent has no GPU placement: %s or %s is not set (its agent.env, written by kbgen node install)", contract.EnvGPUUUID, contract.EnvGPURenderNode)
	}
	o, err := LeaseOptionsFromEnv(lookup)
	if err != nil {
		return Readmission{}, err
	}
	r := Readmission{GPUs: ids, Faults: readFaults(faultFile(o.Dir, ids))}
	if ifOut && r.Faults < FaultLimit {
		return r, nil
	}
	o.Wait, o.Logf = readmitLeaseWait, logf
	lease, err := AcquireLease(ctx, ids, o)
	if err != nil {
		return r, err
	}
	defer lease.Release()
	check := GPUCheck{StateDir: o.Dir, Reset: get(lookup, contract.EnvGPUReset) == "1", Lookup: lookup, Logf: logf}
	if err := check.Check(ctx, rt, ids); err != nil {
		return r, err
	}
	_ = os.Remove(faultFile(o.Dir, ids))
	r.Checked = true
	return r, nil
}

// placementGPUs are the agent's GPUs as the lease and the check name
// them: NVIDIA UUIDs, or AMD render nodes by name (renderD128).
func placementGPUs(lookup func(string) (string, bool)) (string, []string) {
	if ids := splitList(get(lookup, contract.EnvGPUUUID)); len(ids) > 0 {
		return string(contract.RuntimeNVIDIA), ids
	}
	var ids []string
	for _, n := range splitList(get(lookup, contract.EnvGPURenderNode)) {
		ids = append(ids, path.Base(n))
	}
	return string(contract.RuntimeROCm), ids
}
