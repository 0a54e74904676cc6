// Package qualify tells a vendor, before the node scores, whether each
// agent's placement measures well: a built-in calibration benchmark
// (calibrate.go) runs on every agent's CPUs quiet, then while every other
// agent's placement runs a CPU + memory-bandwidth load (load.go); per
// agent it reports the run-to-run CV, the shift under load, the noise the
// runs' noise records saw, and a verdict against thresholds (qualify.go).
// The runs go through the real sandbox (docker, the agent's placement) or,
// on a host without docker, straight onto the agent's CPUs (launch.go).
package qualify
