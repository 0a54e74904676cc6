// Package noise records what disturbed a timed run: the noise record
// (noise.json) that `kbgen run` writes beside result.json.
//
// Around each benchmark and leaderboard run a Sampler takes one snapshot
// before and one after, and reports per source (a file each):
// hypervisor steal on the run's CPUs (steal.go), its cgroup's CPU
// throttling (cgroup.go), involuntary context switches of everything it
// started (ctxsw.go), CPU frequency (cpufreq.go), foreign processes that
// could run on its CPUs (procs.go), and the GPU as nvidia-smi or rocm-smi
// sees it (nvidia.go, rocm.go). Every source is optional: one that cannot
// be read says "unavailable" and why, and the others still report.
//
// The verdict (verdict.go) says clean or noisy, with reasons, and tells
// what the submission cannot cause (external: steal, a foreign process,
// a GPU already throttled before the run, ECC errors) from what it can
// (its own CPU quota throttling, thermal or power limits reached under
// its own load). Only external noise may be retried (Policy.Retry).
package noise
