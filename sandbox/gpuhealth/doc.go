// Package gpuhealth is the clean-GPU check run before every job while the
// job holds its GPUs' lease (Check: nothing of this node's may be on
// them, so a process, memory in use, new ECC errors, the machine's Xids
// or a pending row remap are foreign, leaked or broken), the GPU reset
// that may clear it (reset.go, ResetArgv), the kernel log it reads for
// Xids and amdgpu faults (kmsg.go, xid.go), and an agent's machine faults
// in a row (faults.go, FaultLimit). Its state lives beside the lease
// files, in the lease directory.
package gpuhealth
