// Package process is the Kubernetes backend's launcher: the step
// (`kbgen run --sealed`) started by a root sandbox as its own
// unprivileged uid beside it in the pod, with no capabilities,
// no_new_privs, its own session, only its environment, the agent's
// directories made root's alone first and every process of its uid
// killed after it (run.go); Spec is the planned run, printed as
// util-linux's setpriv would start it for `kbgen sandbox --dry-run`
// (spec.go).
package process
