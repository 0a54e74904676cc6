package gpuhealth

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// FaultLimit is how many machine faults (exit 75) in a row take an agent
// out of rotation until its GPUs pass the clean-GPU check: one 75 may be
// a passing hiccup (the agent is back after its unit's 60 s cool-down);
// three in a row is a machine that keeps failing jobs.
const FaultLimit = 3

// FaultFile counts an agent's machine faults in a row, beside the GPU
// leases: one file per GPU set (an agent's), named so an operator can
// tell whose it is.
func FaultFile(dir string, ids []string) string {
	return filepath.Join(dir, fmt.Sprintf("faults-%s-x%d", ids[0], len(ids)))
}

// RecordExit counts a job's exit for the agent whose GPUs are ids (in
// the lease directory dir): a 75 adds one fault, any other exit ends the
// row. At FaultLimit it returns what the job log should say: the agent
// now stays out of rotation until its GPUs pass the check.
func RecordExit(dir string, ids []string, code int) string {
	file := FaultFile(dir, ids)
	if code != exitcode.TempFail {
		_ = os.Remove(file)
		return ""
	}
	n := Faults(dir, ids) + 1
	_ = os.WriteFile(file, []byte(strconv.Itoa(n)+"\n"), 0o660)
	if n < FaultLimit {
		return ""
	}
	return fmt.Sprintf("this agent's machine fault %d in a row (limit %d): it stays out of rotation until its GPUs pass the clean-GPU check (kbgen node check-gpu --if-out, run by its unit before every start; systemd tries again every 60 s)", n, FaultLimit)
}

// Faults is the agent's count of machine faults in a row.
func Faults(dir string, ids []string) int {
	b, err := os.ReadFile(FaultFile(dir, ids))
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// ClearFaults ends the agent's row: its GPUs passed the check.
func ClearFaults(dir string, ids []string) {
	_ = os.Remove(FaultFile(dir, ids))
}
