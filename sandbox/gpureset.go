package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// The reset tools, by absolute path: the node's sudoers file names
// exactly these command lines (node.ResetSudoers), and sudo matches them
// literally.
const (
	NvidiaSMIPath = "/usr/bin/nvidia-smi"
	AMDSMIPath    = "/opt/rocm/bin/amd-smi"
)

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
func (c GPUCheck) resetAll(ctx context.Context, rt string, problems []gpuProblem) error {
	var done []string
	for _, p := range problems {
		if !p.resettable() {
			return refusef("clean-GPU check: %s (not cleared by a reset)", describeProblems(problems))
		}
		if slices.Contains(done, p.GPU) {
			continue
		}
		c.logf("kbgen sandbox: clean-GPU check: GPU %s %s: resetting it (%s=1)", p.GPU, p.Msg, contract.EnvGPUReset)
		if err := c.reset(ctx, rt, p.GPU); err != nil {
			return refusef("clean-GPU check: %s; the reset failed: %v", describeProblems(problems), err)
		}
		done = append(done, p.GPU)
	}
	return nil
}

// reset runs the GPU's reset command under `sudo -n` (found on PATH).
func (c GPUCheck) reset(ctx context.Context, rt, id string) error {
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
