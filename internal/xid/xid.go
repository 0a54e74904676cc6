// Package xid says whose fault an NVIDIA Xid is: the one list both the
// sandbox's clean-GPU check (Xids in the kernel log since the last job)
// and the noise record (Xids NVML reported during a timed run) judge by.
package xid

import "slices"

// programXids are the Xids a program raises by its own fault: 13 (graphics
// engine exception: an out-of-range access, a bad instruction), 31 (GPU
// memory page fault: an illegal address), 43 (the GPU stopped the
// faulting program's channel) and 45 (preemptive cleanup after one);
// NVIDIA's Xid catalog resolves each by restarting the application. A
// submission can raise them at will, so they must not take a node out of
// rotation or count as the machine's noise; every other Xid is the
// machine's.
var programXids = []int{13, 31, 43, 45}

// ByProgram reports whether Xid code is the running program's own fault
// rather than the machine's.
func ByProgram(code int) bool { return slices.Contains(programXids, code) }
