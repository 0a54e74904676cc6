package gpuhealth

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/sandbox/refusal"
)

// The reset tools, by absolute path: the node's sudoers file names
// exactly these command lines (node.ResetSudoers), and sudo matches them
// literally.
const (
	NvidiaSMIPath = "/usr/bin/nvidia-smi"
	AMDSMIPath    = "/opt/rocm/bin/amd-smi"
)

// MinResetInterval is the least time between two resets of one GPU by the
// clean-GPU check (a job's, or kbgen node check-gpu's): a GPU that needs
// another reset sooner is failing, not dirty, and a reset ends whatever
// else the driver had on it. Within it a problem a reset would clear
// refuses the job (75) instead; the time of each reset is kept beside
// the GPU's lease (gpu-<id>.reset), so every agent and the readmission
// check see the same.
const MinResetInterval = 15 * time.Minute

// gpuResetTimeout bounds one reset: nvidia-smi -r takes seconds, an AMD
// mode-1 reset up to a minute.
const gpuResetTimeout = 2 * time.Minute

// ResetArgv is the root command that resets one GPU: NVIDIA by UUID
// (nvidia-smi --gpu-reset), AMD by PCI address (amd-smi reset -G). The
// sandbox runs it through `sudo -n`; nil for a GPU that cannot be reset
// alone (a MIG instance).
func ResetArgv(rt contract.Runtime, gpu string) []string {
	switch {
	case rt == contract.RuntimeNVIDIA && strings.HasPrefix(gpu, "GPU-"):
		return []string{NvidiaSMIPath, "--gpu-reset", "-i", gpu}
	case rt == contract.RuntimeROCm && gpu != "":
		return []string{AMDSMIPath, "reset", "-g", gpu, "-G"}
	}
	return nil
}

// resettable: a reset may clear the problem.
func (p gpuProblem) resettable() bool {
	return !p.Foreign && !p.Broken && !p.Shared
}

// resetAll resets each GPU with a problem, all of them resettable, and
// says so in the job log; the caller checks again.
func (c Check) resetAll(ctx context.Context, rt string, problems []gpuProblem) error {
	var done []string
	for _, p := range problems {
		if !p.resettable() {
			return refusal.Refusef("clean-GPU check: %s (not cleared by a reset)", describeProblems(problems))
		}
		if slices.Contains(done, p.GPU) {
			continue
		}
		if ago, ok := c.sinceReset(p.GPU); ok && ago < MinResetInterval {
			return refusal.Refusef("clean-GPU check: %s; GPU %s was reset %s ago, and is reset at most once every %s", describeProblems(problems), p.GPU, ago.Round(time.Second), MinResetInterval)
		}
		c.recordReset(p.GPU)
		c.logf("kbgen sandbox: clean-GPU check: GPU %s %s: resetting it (%s=1)", p.GPU, p.Msg, contract.EnvGPUReset)
		if err := c.reset(ctx, rt, p.GPU); err != nil {
			return refusal.Refusef("clean-GPU check: %s; the reset failed: %v", describeProblems(problems), err)
		}
		done = append(done, p.GPU)
	}
	return nil
}

// reset runs the GPU's reset command under `sudo -n` (found on PATH).
func (c Check) reset(ctx context.Context, rt, id string) error {
	target := id
	if rt == string(contract.RuntimeROCm) {
		dev, err := os.Readlink(c.sys("class", "drm", id, "device"))
		if err != nil {
			return err
		}
		target = filepath.Base(dev)
	}
	argv := ResetArgv(contract.Runtime(rt), target)
	if argv == nil {
		return fmt.Errorf("GPU %s cannot be reset alone", id)
	}
	ctx, cancel := context.WithTimeout(ctx, gpuResetTimeout)
	defer cancel()
	_, err := c.tool(ctx, "sudo", append([]string{"-n"}, argv...)...)
	return err
}

// resetFile keeps the time of the GPU's last reset (Unix seconds), beside
// its lease.
func resetFile(dir, id string) string {
	return filepath.Join(dir, "gpu-"+id+".reset")
}

// sinceReset is how long ago the check last reset GPU id; false when it
// never did (or the record is unreadable). A time in the future (a clock
// set back) counts as now.
func (c Check) sinceReset(id string) (time.Duration, bool) {
	b, err := os.ReadFile(resetFile(c.StateDir, id))
	if err != nil {
		return 0, false
	}
	sec, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, false
	}
	return max(time.Since(time.Unix(sec, 0)), 0), true
}

// recordReset stores now as GPU id's last reset, before the reset runs:
// a reset that fails has still hit the GPU.
func (c Check) recordReset(id string) {
	_ = os.WriteFile(resetFile(c.StateDir, id), []byte(strconv.FormatInt(time.Now().Unix(), 10)+"\n"), 0o660)
}
