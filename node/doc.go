// Package node turns a vendor's GPU machine into one isolated Buildkite
// agent per GPU: it reads the machine (sysfs, nvidia-smi, ROCm's KFD
// topology), plans each agent's placement (its GPU, a cpuset of whole cores
// on that GPU's NUMA node, a memory share), renders the agent config,
// systemd units and environment hooks that carry the placement, installs
// them idempotently into a root, and checks a running node (doctor).
//
// The placement it writes is the contract with package sandbox: the
// environment hook exports the contract.Env* variables
// (internal/contract/env.go), and `kbgen sandbox` never grants a step more
// than they allow.
package node
