package sandbox

import (
	"context"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
	"github.com/gpu-mode/kbgen/sandbox/gpuhealth"
	"github.com/gpu-mode/kbgen/sandbox/lease"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// FaultLimit is gpuhealth.FaultLimit, for the CLI's words.
const FaultLimit = gpuhealth.FaultLimit

// readmitLeaseWait is how long `kbgen node check-gpu` waits for the
// agent's GPUs: another agent's job may hold them (a multi-GPU agent
// shares them); the unit tries again a minute later.
const readmitLeaseWait = 10 * time.Second

// RecordExit counts the job's exit for its agent (gpuhealth.RecordExit)
// and returns what the job log should say at FaultLimit. A job without
// GPUs is not counted, nor one that waited out the lease (the node was
// busy; taking a multi-GPU agent out for that would starve it).
func (j *Job) RecordExit(code int) string {
	if len(j.Spec.GPUs) == 0 || j.leaseBusy {
		return ""
	}
	return gpuhealth.RecordExit(j.lease.Dir, j.Spec.GPUs, code)
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
// another job, is a refusal.RefusedError (75): the unit does not start, and
// systemd tries again after RestartSec.
// logf reports the lease wait, a skipped check and a reset.
func Readmit(ctx context.Context, lookup contract.Lookup, ifOut bool, logf func(string, ...any)) (Readmission, error) {
	r, err := readmit(ctx, lookup, ifOut, logf)
	return r, withCode(err)
}

// readmit is Readmit, its errors without their exit code.
func readmit(ctx context.Context, lookup contract.Lookup, ifOut bool, logf func(string, ...any)) (Readmission, error) {
	rt, ids := dockerargv.GPUsFromEnv(lookup)
	if len(ids) == 0 {
		return Readmission{}, refusal.Refusef("this agent has no GPU placement: %s or %s is not set (its agent.env, written by kbgen node install)", contract.EnvGPUUUID, contract.EnvGPURenderNode)
	}
	o, err := lease.OptionsFromEnv(lookup)
	if err != nil {
		return Readmission{}, err
	}
	r := Readmission{GPUs: ids, Faults: gpuhealth.Faults(o.Dir, ids)}
	if ifOut && r.Faults < FaultLimit {
		return r, nil
	}
	o.Wait, o.Logf = readmitLeaseWait, logf
	held, err := lease.Acquire(ctx, ids, o)
	if err != nil {
		return r, err
	}
	defer held.Release()
	check := gpuhealth.Check{StateDir: o.Dir, Reset: get(lookup, contract.EnvGPUReset) == "1", Path: get(lookup, "PATH"), Logf: logf}
	if err := check.Run(ctx, rt, ids); err != nil {
		return r, err
	}
	gpuhealth.ClearFaults(o.Dir, ids)
	r.Checked = true
	return r, nil
}
