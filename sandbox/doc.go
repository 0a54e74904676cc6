// Package sandbox is the host side of an evaluation: on the agent host, with
// rights to the Docker engine, it combines what a step asks for (the
// gpu-docker plugin config, plugincfg.GPUDocker) with where this agent may
// run (the placement its environment hook exports) into one `docker run`,
// never granting more than the agent owns, and runs it.
//
// It composes four concerns, each a package of its own:
//
//   - dockerargv: the `docker run` argv of one step (DockerRun) and the
//     agent's placement it is planned within;
//   - lease: the node's GPU lease, one job per GPU;
//   - gpuhealth: the clean-GPU check before every job, the GPU reset, the
//     kernel log it reads and an agent's machine faults in a row;
//   - process: the Kubernetes backend's launcher, the step as its own uid
//     beside the sandbox in the pod.
//
// This package reads the host's environment once, at the door (ReadStep,
// step.go), plans a Job from that value (NewJob), and runs it (Job.Run:
// stage, lease, stale containers, the check, the launch, the inert job
// log, what it vouches for from the runner's sealed result, the host's
// noise), ending in one exit code (ExitCode, Outcome.Exit). Its refusals
// are package refusal's.
//
// It is separate from package runner on purpose: the runner executes inside
// the container as an unprivileged user, the sandbox outside it with the
// power to start containers. Different trust levels, different packages.
package sandbox
