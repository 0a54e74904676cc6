// Package dockerargv is the `docker run` of one step: what the step asks
// for (the gpu-docker plugin config) combined with where its agent may run
// (Placement, read from the placement env `kbgen node install` writes)
// into one argv that never grants more than the agent owns: its GPUs by
// UUID or render node (gpus.go), whole cores of its cpuset (cpuset.go),
// bounded memory, shm, pids and tmpfs mounts (paths.go), no network, no
// capabilities, a read-only root, and an environment from an allow-list
// (env.go). It runs nothing: package sandbox launches the Spec.
package dockerargv
