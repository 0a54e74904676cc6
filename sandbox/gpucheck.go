package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// MaxIdleUsedMiB is the most device memory a leased GPU may have in use
// before its job starts: an idle GPU holds next to nothing; more means a
// process the node does not know about, or a driver that leaked.
const MaxIdleUsedMiB = 2048

// gpuCheckTimeout bounds the nvidia-smi queries of one check.
const gpuCheckTimeout = 20 * time.Second

// GPUCheck is the clean-GPU check before every job, run while the job
// holds its GPUs' lease (so nothing of this node's may be on them).
type GPUCheck struct {
	// Lookup is the sandbox's environment (PATH finds nvidia-smi).
	Lookup func(string) (string, bool)
	// StateDir keeps each GPU's ECC count from the last check
	// (gpu-<uuid>.ecc, beside its lease).
	StateDir string
	// Logf reports a skipped check.
	Logf func(format string, args ...any)
}

// Check refuses (75: the machine's fault, Buildkite retries elsewhere) a
// job whose NVIDIA GPUs are not clean: a compute process on one (the
// lease says no job of this node has it: a foreign or orphaned process),
// more than MaxIdleUsedMiB of memory in use, or uncorrected ECC errors
// since the last job. MIG instances and AMD GPUs are not checked here
// (docs/isolation.md); a node without nvidia-smi is logged and passes,
// since docker --gpus fails there anyway.
func (c GPUCheck) Check(ctx context.Context, rt string, ids []string) error {
	var gpus []string
	for _, id := range ids {
		if strings.HasPrefix(id, "GPU-") {
			gpus = append(gpus, id)
		}
	}
	if rt != string(contract.RuntimeNVIDIA) || len(gpus) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, gpuCheckTimeout)
	defer cancel()
	state, err := c.smi(ctx, "--query-gpu=uuid,memory.used,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader,nounits")
	if errors.Is(err, exec.ErrNotFound) {
		c.logf("kbgen sandbox: clean-GPU check skipped: nvidia-smi is not on PATH")
		return nil
	}
	if err != nil {
		return refusef("clean-GPU check: nvidia-smi: %v", err)
	}
	apps, err := c.smi(ctx, "--query-compute-apps=gpu_uuid,pid,process_name,used_memory", "--format=csv,noheader,nounits")
	if err != nil {
		return refusef("clean-GPU check: nvidia-smi: %v", err)
	}
	rows := csvRows(state, 3)
	for _, id := range gpus {
		row, ok := rows[id]
		if !ok {
			return refusef("clean-GPU check: GPU %s is not listed by nvidia-smi (fallen off the bus?)", id)
		}
		if p, ok := csvRows(apps, 4)[id]; ok {
			return refusef("clean-GPU check: GPU %s runs a compute process no job of this node owns (pid %s, %s); it is not clean", id, p[1], printable(p[2]))
		}
		if used, err := strconv.Atoi(row[1]); err == nil && used > MaxIdleUsedMiB {
			return refusef("clean-GPU check: GPU %s has %d MiB in use before the job (at most %d): it is not clean", id, used, MaxIdleUsedMiB)
		}
		if err := c.checkECC(id, row[2]); err != nil {
			return err
		}
	}
	return nil
}

// checkECC compares the GPU's uncorrected ECC count with the last job's
// and records it; "[N/A]" (no ECC) passes.
func (c GPUCheck) checkECC(id, value string) error {
	n, err := strconv.ParseInt(value, 10, 64)
	if err != nil {
		return nil
	}
	file := filepath.Join(c.StateDir, "gpu-"+id+".ecc")
	if prev, err := os.ReadFile(file); err == nil {
		if p, err := strconv.ParseInt(strings.TrimSpace(string(prev)), 10, 64); err == nil && n > p {
			_ = os.WriteFile(file, []byte(value+"\n"), 0o660)
			return refusef("clean-GPU check: GPU %s has %d new uncorrected ECC error(s) since the last job", id, n-p)
		}
	}
	_ = os.WriteFile(file, []byte(value+"\n"), 0o660)
	return nil
}

func (c GPUCheck) smi(ctx context.Context, args ...string) ([]byte, error) {
	path := "nvidia-smi"
	if dirs, ok := c.Lookup("PATH"); ok {
		found := ""
		for _, d := range filepath.SplitList(dirs) {
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

func (c GPUCheck) logf(format string, args ...any) {
	if c.Logf != nil {
		c.Logf(format, args...)
	}
}

// csvRows keys nvidia-smi's CSV rows of n fields by their first.
func csvRows(out []byte, n int) map[string][]string {
	rows := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		f := strings.Split(strings.TrimSpace(line), ",")
		if len(f) != n {
			continue
		}
		for i := range f {
			f[i] = strings.TrimSpace(f[i])
		}
		rows[f[0]] = f
	}
	return rows
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
