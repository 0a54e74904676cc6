package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/node"
	"github.com/gpu-mode/kbgen/sandbox/dockerargv"
)

// DoctorCmd checks a vendor node.
type DoctorCmd struct {
	Root           string        `default:"/" placeholder:"DIR" help:"The machine's root: where /sys/fs/cgroup, /dev/kfd and the installed plan are read. Example: --root /"`
	Image          string        `placeholder:"IMAGE" help:"Runner image for the per-agent isolation probe. Default: the vendor registry's image for the installed queue. Example: --image ghcr.io/gpu-mode/kbgen-runner-cuda:12.8.1"`
	SkipContainers bool          `help:"Skip the per-agent container probes (no image pulled or run)."`
	Timeout        time.Duration `default:"5m" help:"Give up on the whole check after this long. Example: --timeout 10m"`
	E2E            bool          `name:"e2e" help:"Instead of the checks: prove the whole Buildkite path on this node. Starts a local Buildkite and one temporary agent with this node's real config, environment and hooks for --gpu, runs the example job through kbgen submit, prints its FullResult and the time each phase took, and removes everything. Needs buildkite-agent, git, docker and the kbgen-e2e binary beside kbgen (it holds the local Buildkite). Example: kbgen doctor --e2e --gpu 0"`
	GPU            int           `name:"gpu" default:"0" placeholder:"N" help:"With --e2e: the GPU whose agent config is used. Example: --gpu 3"`
	Vendors        string        `placeholder:"FILE" help:"Vendor registry YAML replacing the built-in one (for the probe's default image; with --buildkite, the queues expected to have agents). Default: KBGEN_VENDORS."`

	Buildkite      bool   `name:"buildkite" help:"Instead of the node checks: check the Buildkite organization through the REST API (the pipeline's settings steps and settings, the token's scopes, agents per queue, the rate limits) against docs/buildkite-setup.md. Reads only; needs --org, --pipeline and the token kbgen serve uses. Example: kbgen doctor --buildkite --org gpu-mode --pipeline kernelbot"`
	BootstrapQueue string `name:"bootstrap-queue" placeholder:"QUEUE" help:"With --buildkite: the control agents' queue the bootstrap must run on. Default: KBGEN_BOOTSTRAP_QUEUE, else ${control_queue}."`
	APIBudget      int    `name:"api-budget" default:"${api_budget}" placeholder:"N" help:"With --buildkite: kbgen serve's --api-budget, checked against the organization's limit."`
	UserBudget     int    `name:"user-budget" default:"${user_budget}" placeholder:"N" help:"With --buildkite: kbgen serve's --user-budget, checked against the user's limit."`
	BuildkiteFlags `embed:""`
}

// Help is shown after the flags.
func (c *DoctorCmd) Help() string {
	return `One PASS, FAIL or SKIP line per check, and exit status 1 if any failed:
  - agents installed: kbgen node install wrote /etc/buildkite-agent/kbgen/plan.json
  - GPU driver: nvidia-smi (or /dev/kfd + amdgpu) sees one GPU per agent
  - docker: the engine answers
  - NVIDIA container toolkit / ROCm devices: the GPU runtime docker needs
  - GPU profiling counters: whether the driver lets a job profile (RmProfilingAdminOnly)
  - GPU fault reports: the kernel log the sandbox reads Xids from (dmesg_restrict)
  - cgroup v2: with cpuset, memory and pids, and docker using it
  - kbgen static binary: the kbgen the agents mount into containers is static (else every step exits 75)
  - gpu-docker plugin pin: the plugin the agents run is this kbgen's
  - buildkite-agent: installed, and a version kbgen accepts
  - kbgen-nvml (NVML): the NVML helper beside kbgen (else nvidia-smi answers)
  - buildkite-agent-gpu@N.service: each agent's unit is active
  - housekeeping CPUs: host services (systemd, dockerd, containerd, the agents, sshd) run only on the CPUs no agent owns
  - isolation gpuN: a container started with exactly the sandbox's argv for that agent sees one GPU (its own), its cpuset and NUMA node, its memory limit and no swap

On a control host (kbgen node install --control) it checks instead: the
control agent's queue, the signing key (private, 0600, owned by the agent
user), the vendor registry, the token, buildkite-agent and its unit, and
that no GPU agents share the host.

  sudo kbgen doctor
  kbgen doctor --skip-containers

With --buildkite, the organization instead (docs/buildkite-setup.md): one
PASS, WARN or FAIL line per check, a FAIL or WARN followed by the fix.
Exit 0: no check failed (warnings allowed); 1: at least one failed;
4: Buildkite did not answer, nothing was checked; 2: bad flags.

  kbgen doctor --buildkite --org gpu-mode --pipeline kernelbot   # fails against a new pipeline: its settings are Buildkite's defaults`
}

func (c *DoctorCmd) Run(g *Globals) error {
	if c.E2E {
		return c.runE2E(g)
	}
	if c.Buildkite {
		return c.runBuildkite(g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.Timeout)
	defer cancel()
	d := &node.Doctor{Root: os.DirFS(c.Root), Runner: node.ExecRunner{}, SandboxHost: dockerargv.LocalHost(), SkipContainers: c.SkipContainers}
	// The kbgen the agents run: the one on their PATH (node install's
	// --kbgen-path), which is this one when run as `sudo kbgen doctor`.
	if exe, err := os.Executable(); err == nil {
		d.Kbgen = exe
	}
	if !c.SkipContainers {
		d.Image = c.Image
		if d.Image == "" {
			reg, err := loadRegistry(g, c.Vendors)
			if err != nil {
				return err
			}
			plan, _ := node.ReadInstalledPlan(c.Root) // none installed: doctor's own check says so
			d.Image = node.QueueImage(plan, reg)
		}
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding kbgen's own binary for the probe's mount: %w", err)
		}
		d.RunnerBinary = exe
	}
	failed := 0
	for _, ch := range d.Run(ctx) {
		word := "PASS"
		switch {
		case ch.Skipped:
			word = "SKIP"
		case !ch.OK:
			word = "FAIL"
			failed++
		}
		fmt.Fprintf(g.Stdout, "%s  %s: %s\n", word, ch.Name, ch.Detail)
	}
	if failed > 0 {
		fmt.Fprintf(g.Stderr, "kbgen: doctor: %d checks failed; see docs/vendor-onboarding.md#troubleshooting\n", failed)
		return exitcode.Silent(exitcode.Failure)
	}
	return nil
}
