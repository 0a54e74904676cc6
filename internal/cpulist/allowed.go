package cpulist

import (
	"fmt"
	"io/fs"
	"strings"
)

// Allowed is the CPU affinity of a process: the Cpus_allowed_list line of
// its status file, "<pid>/status" in proc (a procfs, or a test's fixture;
// proc(5); pid may carry the path to it, "proc/42" in a root file system). The node's housekeeping check reads the host
// services' and the noise record the run's own and its neighbours'.
func Allowed(proc fs.FS, pid string) (Set, error) {
	b, err := fs.ReadFile(proc, pid+"/status")
	if err != nil {
		return nil, err
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return Parse(strings.TrimSpace(v))
		}
	}
	return nil, fmt.Errorf("no Cpus_allowed_list for pid %s", pid)
}
