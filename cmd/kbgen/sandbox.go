package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/version"
	"github.com/gpu-mode/kbgen/sandbox"
)

// SandboxCmd is the gpu-docker plugin's command hook: it turns the step's
// plugin config and this agent's placement into one `docker run`.
type SandboxCmd struct {
	DryRun       bool          `help:"Print the docker command, one flag per line, and run nothing: the payload file and out dir it mounts are created (and removed) only by a real run."`
	OutDir       string        `default:"." placeholder:"DIR" help:"Where the result of 'kbgen run' is written after the run: result.json and noise.json as the runner sealed them, profile_data/*.zip decoded from that result, or the sandbox's own failed result.json when nothing verifies. Nothing the container wrote is copied. The plugin hook passes a fresh directory outside the checkout and publishes from it. Example: --out-dir /tmp/kbgen-results"`
	RunnerBinary string        `placeholder:"PATH" help:"The static kbgen mounted read-only into the container as /usr/local/bin/kbgen. Default: this kbgen (it must be built with CGO_ENABLED=0). Example: --runner-binary /usr/local/bin/kbgen"`
	StageDir     string        `placeholder:"DIR" help:"Where the private payload file and out dir are staged on the host; dockerd must see it (not a PrivateTmp /tmp). Default: $$BUILDKITE_BUILD_PATH/.kbgen-stage, else $$TMPDIR or /tmp. Example: --stage-dir /var/lib/buildkite-agent/tmp"`
	StopTimeout  time.Duration `default:"${stop_timeout}" help:"Grace period between SIGTERM and SIGKILL for the container when the job is cancelled; keep it below the agent's cancel-grace-period (10s by default). Example: --stop-timeout 8s"`
	NoGPU        bool          `name:"no-gpu" help:"Give the container no GPU, and need no GPU placement: a job run by hand on a machine without a GPU runtime (also KBGEN_SANDBOX_NO_GPU=1)."`
	Launcher     string        `default:"docker" enum:"docker,process" help:"docker: one 'docker run' (a gpu-docker node). process: the step as its own unprivileged uid beside this sandbox, which runs as root with only CAP_SETUID, CAP_SETGID and CAP_KILL: the Kubernetes backend's pod, where the GPUs, CPUs and memory are the pod's and no gpu-docker config or placement is read. Example: --launcher process"`
	User         string        `default:"1000:1000" placeholder:"UID:GID" help:"The process launcher's uid and gid for the step (never 0): one that neither the agent nor this sandbox runs as. Example: --user 1000:1000"`
	WorkDir      string        `default:"/work" placeholder:"DIR" help:"The process launcher's working directory for the step, writable by --user. Example: --work-dir /work"`
	Protect      []string      `placeholder:"DIR" help:"With the process launcher: a directory made root's alone (mode 0700) before the step starts; it must be root's. In an agent-stack-k8s pod, /workspace (the agent binary, its coordination socket, hooks and plugins). Example: --protect /workspace"`

	Command []string `arg:"" optional:"" passthrough:"" placeholder:"CMD" help:"The step's command, after '--'. 'kbgen run' is pointed at the mounted payload and out dir; anything else runs as given. Example: -- kbgen run"`
}

// Help is shown after the flags by `kbgen sandbox --help`.
func (c *SandboxCmd) Help() string {
	return `Run on the agent host by .buildkite/plugins/gpu-docker/hooks/command, or
by hand to debug one job on a node.

What the step asks for comes from the plugin config (BUILDKITE_PLUGINS, or
BUILDKITE_PLUGIN_GPU_DOCKER_IMAGE, _RUNTIME, _GPUS, _CPUS, _MEMORY,
_SHM_SIZE, _PIDS_LIMIT, _NETWORK; 'kbgen preview --queue QUEUE' shows a
vendor's). Where it may run comes from the agent's environment hook:
KERNELBOT_GPU_UUID (NVIDIA) or KERNELBOT_GPU_RENDER_NODE (AMD), one GPU or
a multi-GPU agent's comma-separated set (a step gets all of them),
KERNELBOT_CPUSET, KERNELBOT_MEMS, KERNELBOT_MEMORY, and optionally
KERNELBOT_PIDS_MAX and KERNELBOT_SHM_MAX ('kbgen node env' prints them). A
request beyond what the agent owns, or a missing placement, exits 75 so
Buildkite retries elsewhere. In a Buildkite job (BUILDKITE_JOB_ID set) the
step's signed KERNELBOT_QUEUE must equal the agent's queue tag,
BUILDKITE_AGENT_META_DATA_QUEUE, or the job is refused (65); a run by hand,
with no BUILDKITE_JOB_ID, skips that check. Where the agent's environment
hook sets KBGEN_VERIFICATION_KEY (kbgen node install --verification-key),
the step's KBGEN_STEP_SIGNATURE must verify with it and sign exactly this
command, plugin config, step env, payload and queue, or the step is refused
(65): it was changed after kbgen generate signed it.

The payload (KERNELBOT_PAYLOAD or its pieces) reaches the container as a
read-only file, never in argv; the container's environment is an
allow-list. Exit status: the container's; 75 when refused or when docker
could not start it, or when another job of the node still holds one of
its GPUs after KBGEN_LEASE_WAIT (default 15m; the lock files are in
KBGEN_LEASE_DIR, default /run/kbgen, and the wait and the holder are
printed); 65 for a bad payload, a re-routed step or one changed
after signing; 2 for a bad
plugin config.

With --launcher process (the Kubernetes backend's pod: see
docs/security.md) no container is started: this sandbox, as root with
only CAP_SETUID, CAP_SETGID and CAP_KILL, starts 'kbgen run' as --user
with a clean environment, its own session, no capabilities,
no_new_privs and no core dumps, after making each --protect directory
root's alone; it hands over the key and vouches for the result exactly
as on a docker node, then kills whatever of --user is left. --dry-run
prints the setpriv equivalent.

One job by hand, from the repository root: this kbgen is mounted into the
container, so build it static (CGO_ENABLED=0 go build -o kbgen ./cmd/kbgen).
On a GPU node, take the agent's placement with
eval "$(kbgen node env --gpu-index 0)" instead of the first export and
drop --no-gpu.

    export KERNELBOT_CPUSET=0 KERNELBOT_MEMS=0 KERNELBOT_MEMORY=2g
    export BUILDKITE_PLUGIN_GPU_DOCKER_IMAGE=ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1 BUILDKITE_PLUGIN_GPU_DOCKER_RUNTIME=nvidia
    export KERNELBOT_PAYLOAD="$(kbgen encode --example identity --mode test)"
    kbgen sandbox --no-gpu --dry-run -- kbgen run      # the docker run it starts
    kbgen sandbox --no-gpu -- kbgen run                # runs it: result.json lands here
    jq .runs.test.run.passed result.json`
}

func (c *SandboxCmd) Run(g *Globals) error {
	if len(c.Command) > 0 && c.Command[0] == "--" {
		c.Command = c.Command[1:]
	}
	if len(c.Command) == 0 {
		return exitcode.With(exitcode.Usage, errors.New("sandbox: no command: usage is kbgen sandbox [flags] -- CMD [ARG ...]"))
	}
	job, err := sandbox.NewJob(g.LookupEnv, sandbox.Request{
		Command:      c.Command,
		StageDir:     c.StageDir,
		RunnerBinary: c.RunnerBinary,
		NoGPU:        c.NoGPU,
		Launcher:     c.Launcher,
		User:         c.User,
		WorkDir:      c.WorkDir,
		Protect:      c.Protect,
	})
	if err != nil {
		return err
	}
	if w := sandbox.VersionSkew(g.LookupEnv, version.Version); w != "" {
		fmt.Fprintln(g.Stderr, "kbgen sandbox: "+w)
	}
	if c.DryRun {
		fmt.Fprint(g.Stdout, job.Spec.String())
		fmt.Fprintf(g.Stderr, "kbgen sandbox: dry run: nothing staged; a real run creates the payload file and out dir under %s and removes them after\n", job.Stage.Dir)
		return nil
	}

	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	l := &sandbox.Launcher{Env: g.Environ(), Stdout: g.Stdout, Stderr: g.Stderr, Log: g.Stderr, Signals: sigs, StopTimeout: c.StopTimeout}
	out, err := job.Run(context.Background(), l, c.OutDir)
	code, _ := out.Exit()
	if err != nil {
		code = exitcode.Of(err)
	}
	// K machine faults in a row keep this agent out until its GPUs pass.
	if note := job.RecordExit(code); note != "" {
		fmt.Fprintln(g.Stderr, "kbgen sandbox: "+note)
	}
	if err != nil {
		return err
	}
	out.WriteReport(g.Stderr, c.OutDir)
	return exitcode.Exit(out.Exit())
}
