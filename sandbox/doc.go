// Package sandbox is the host side of an evaluation: on the agent host, with
// rights to the Docker engine, it combines what a step asks for (the
// gpu-docker plugin config, plugincfg.GPUDocker) with where this agent may
// run (the placement its environment hook exports) into one `docker run`,
// never granting more than the agent owns, and runs it.
//
// It is separate from package runner on purpose: the runner executes inside
// the container as an unprivileged user, the sandbox outside it with the
// power to start containers. Different trust levels, different packages.
package sandbox
