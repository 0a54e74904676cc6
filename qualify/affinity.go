package qualify

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/gpu-mode/kbgen/internal/cpulist"
)

// pinThread restricts the calling OS thread to cpus (sched_setaffinity on
// thread 0 = the caller); the caller holds runtime.LockOSThread.
func pinThread(cpus []int) error {
	var mask [cpulist.MaxCPU / 64]uint64
	for _, c := range cpus {
		if c < 0 || c >= cpulist.MaxCPU {
			return fmt.Errorf("cpu %d out of range", c)
		}
		mask[c/64] |= 1 << (uint(c) % 64)
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_SCHED_SETAFFINITY, 0, uintptr(len(mask)*8), uintptr(unsafe.Pointer(&mask[0])))
	if errno != 0 {
		return fmt.Errorf("sched_setaffinity %s: %w", cpulist.Format(cpus), errno)
	}
	return nil
}
