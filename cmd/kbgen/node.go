package main

import (
	"context"
	"fmt"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/exitcode"
	"github.com/gpu-mode/kbgen/internal/shellquote"
	"github.com/gpu-mode/kbgen/jobenv"
	"github.com/gpu-mode/kbgen/node"
)

// NodeCmd groups the vendor-node commands.
type NodeCmd struct {
	Plan    NodePlanCmd    `cmd:"" help:"Show the agent each GPU gets: its device, NUMA node, cpuset and memory."`
	Install NodeInstallCmd `cmd:"" help:"Write each agent's config, environment hook and systemd unit (idempotent)."`
	Env     NodeEnvCmd     `cmd:"" help:"Print what a job on one agent sees (placement, step, example job) as shell exports, to reproduce a job by hand."`
	Qualify NodeQualifyCmd `cmd:"" help:"Measure every agent's placement quiet and with its neighbours loaded; fail a node that measures badly."`
	// CheckGPU is what an agent's unit runs before it starts.
	CheckGPU NodeCheckGPUCmd `cmd:"" name:"check-gpu" help:"Check one agent's GPUs are clean (its unit runs it before every start: an agent taken out of rotation after machine faults comes back when this passes)."`
	// Calibrate is what qualify runs on each placement.
	Calibrate NodeCalibrateCmd `cmd:"" hidden:"" help:"Run the calibration benchmark (or the load) here and print JSON (kbgen node qualify runs it)."`
}

// machineFlags describe the machine to plan for: this one, or fixtures.
type machineFlags struct {
	Sysfs         string   `default:"/sys" placeholder:"DIR" help:"The /sys tree to read NUMA nodes, cores, PCI devices and the KFD topology from. Example: --sysfs node/testdata/h100x8/sys"`
	NvidiaSMI     string   `name:"nvidia-smi" placeholder:"FILE" help:"Output of 'nvidia-smi --query-gpu=index,uuid,pci.bus_id,name --format=csv,noheader' to use instead of running nvidia-smi. Example: --nvidia-smi smi.csv"`
	RocmSMI       string   `name:"rocm-smi" placeholder:"FILE" help:"Output of 'rocm-smi --showbus --showproductname --showuniqueid --json' for AMD model names and unique ids (AMD GPUs are found in sysfs either way). Example: --rocm-smi smi.json"`
	ReserveCores  int      `default:"1" placeholder:"N" help:"Whole cores (SMT siblings together) of each NUMA node kept as housekeeping CPUs: the node's first cores, where the OS services, dockerd, containerd, the agents and kbgen are confined (with the cores left over after an even split). Default: ${default} (setup-node.sh: RESERVE_CORES). Example: --reserve-cores 2"`
	Shape         []string `placeholder:"QUEUE" help:"A multi-GPU queue of the registry to serve besides --queue (repeatable): agents that each own a set of its GPU count, chosen by topology (one NVLink/NVSwitch or xGMI island where there is one). They share the GPUs with the one-GPU agents; kbgen sandbox's lease lets one job at a time use each GPU. Example: --shape nvidia-h100x8"`
	MIGQueue      string   `name:"mig-queue" placeholder:"QUEUE" help:"On each GPU with MIG enabled, one agent per MIG instance on this queue (a test-only queue of the registry) instead of the GPU's agent. Example: --mig-queue nvidia-h100-mig"`
	NvidiaTopo    string   `name:"nvidia-topo" placeholder:"FILE" help:"Output of 'nvidia-smi topo -m' to use instead of running it (--shape). Example: --nvidia-topo topo.txt"`
	NvidiaList    string   `name:"nvidia-smi-list" placeholder:"FILE" help:"Output of 'nvidia-smi -L' to use instead of running it (--mig-queue). Example: --nvidia-smi-list gpus.txt"`
	NVMLInventory string   `name:"nvml-inventory" placeholder:"FILE" help:"Output of 'kbgen-nvml inventory' (GPUs, MIG instances and links from NVML) for whichever of the three nvidia-smi files is not given. On a live machine kbgen asks the kbgen-nvml beside it, and runs nvidia-smi where there is none. Example: --nvml-inventory node/testdata/l4x4/nvml-inventory.json"`
	ReserveMemory string   `default:"16g" placeholder:"SIZE" help:"Memory of each NUMA node kept for the host, docker syntax. Default: ${default} (setup-node.sh: RESERVE_MEMORY). Example: --reserve-memory 32g"`
	// AllowUnknownQueue: a mistyped --queue used to install a whole node
	// no job reaches, with exit 0 (issue 27).
	AllowUnknownQueue bool `name:"allow-unknown-queue" help:"Plan for a --queue the vendor registry does not list (yet) instead of refusing it (exit 2): a typo would install agents no job ever reaches. Example: --queue vendor-new-gpu --allow-unknown-queue"`
}

// source is the machine flags, the queue and the registry (KBGEN_VENDORS)
// as the node package plans from them.
func (m *machineFlags) source(g *Globals, queue string) node.Source {
	return node.Source{
		Sysfs: m.Sysfs, NvidiaSMI: m.NvidiaSMI, RocmSMI: m.RocmSMI, NvidiaTopo: m.NvidiaTopo, NvidiaList: m.NvidiaList,
		NVMLInventory: m.NVMLInventory, NVML: g.NVML(),
		ReserveCores: m.ReserveCores, ReserveMemory: m.ReserveMemory, Shapes: m.Shape, MIGQueue: m.MIGQueue,
		Queue: queue, AllowUnknownQueue: m.AllowUnknownQueue, Vendors: g.Getenv(contract.EnvVendors),
	}
}

// plan plans the machine the flags describe.
func (m *machineFlags) plan(ctx context.Context, g *Globals, queue string) (*node.Plan, error) {
	return node.PlanSource(ctx, m.source(g, queue))
}

// NodePlanCmd prints the plan.
type NodePlanCmd struct {
	machineFlags `embed:""`
	Queue        string `placeholder:"Q" help:"The Buildkite queue the agents will serve; checked against the vendor registry's runtime, an alias (h100) resolved to its queue (nvidia-h100). Example: --queue nvidia-h100"`
	JSON         bool   `name:"json" help:"Print the plan as JSON instead of a table."`
}

// Help is shown after the flags.
func (c *NodePlanCmd) Help() string {
	return `One agent per GPU. Each gets its GPU (UUID on NVIDIA; render node and PCI
bus on AMD), the GPU's NUMA node (from sysfs, never index arithmetic; a GPU
whose firmware says -1 goes on node 0, with a note), a cpuset of whole
cores (SMT siblings together) on that node after the host's reserve, split
evenly among the node's GPUs, and an even share of the node's memory after
the host's reserve. A node with fewer free cores than GPUs is refused.

  kbgen node plan
  kbgen node plan --json --queue nvidia-h100
  kbgen node plan --sysfs node/testdata/h100x8/sys --nvidia-smi node/testdata/h100x8/nvidia-smi.csv

Exit codes: 0 ok; 2 bad flags or files, or a queue these GPUs cannot serve;
75 the machine cannot host the agents (no GPUs found, too few cores or too
little memory left after --reserve-cores and --reserve-memory).`
}

func (c *NodePlanCmd) Run(g *Globals) error {
	p, err := c.plan(context.Background(), g, c.Queue)
	if err != nil {
		return err
	}
	if c.JSON {
		return p.WriteJSON(g.Stdout)
	}
	return p.WriteTable(g.Stdout)
}

// NodeInstallCmd renders and installs the agents.
type NodeInstallCmd struct {
	machineFlags    `embed:""`
	Queue           string `placeholder:"Q" help:"The Buildkite queue the agents serve (tag queue=Q); an alias (h100) is resolved to the registry's queue (nvidia-h100), the name steps are routed to. Required unless --control. Example: --queue nvidia-h100"`
	Control         bool   `help:"Install Kernelbot's control agent instead of GPU agents: one agent (--spawn jobs at once) on queue kernelbot-control that runs the bootstrap of the pipeline's settings steps and signs each eval step with --signing-key. No GPU placement, no plugin, no checkout. See docs/buildkite-setup.md#control-agents."`
	SigningKey      string `placeholder:"JWKS" help:"With --control: the private JWKS from 'kbgen keygen --private-out' (mode 0600). Installed as /etc/buildkite-agent/kbgen/control/signing-key.jwks, 0600, owned by --user; the control agent exports it as KBGEN_SIGNING_KEY. Without it, an installed key is kept. Example: --signing-key kernelbot-signing.jwks"`
	Vendors         string `placeholder:"FILE" help:"With --control: a vendor registry replacing the built-in one, installed for the bootstrap (KBGEN_VENDORS on the control agent). Without it, an installed registry is kept, else the built-in one is used. Example: --vendors vendors.yaml"`
	Spawn           int    `default:"4" placeholder:"N" help:"With --control: how many bootstraps the control agent runs at once. Default: ${default}. Example: --spawn 8"`
	Root            string `default:"/" placeholder:"DIR" help:"Install under DIR instead of / (a staging tree; nothing is started). Example: --root /tmp/stage"`
	DryRun          bool   `help:"List the files and whether each would be created, updated or left unchanged; write nothing."`
	TokenFile       string `placeholder:"FILE" help:"File holding the Buildkite agent token (default: $$BUILDKITE_AGENT_TOKEN). Written root-only (0600) to /etc/buildkite-agent/kbgen/token.env; never printed. Without either, an installed token is kept. Example: --token-file /root/agent-token"`
	Plugin          string `placeholder:"DIR" help:"The gpu-docker plugin to pin instead of the one built into this kbgen (the default, always on): installed under /usr/local/share/kbgen/plugins, with a post-checkout hook per agent that puts it in place of whatever a build checks out, so a build at another commit cannot run its own hook code on this host. Example: --plugin .buildkite/plugins/gpu-docker"`
	VerificationKey string `placeholder:"JWKS" help:"Public JWKS kbgen sandbox verifies each step's kbgen signature with (a changed step exits 65). Without it, an installed key is kept. Example: --verification-key kernelbot-public.jwks"`
	AgentBinary     string `default:"${agent_binary}" placeholder:"PATH" help:"The buildkite-agent executable the units start. Example: --agent-binary /usr/local/bin/buildkite-agent"`
	KbgenPath       string `default:"/usr/local/bin/kbgen" placeholder:"PATH" help:"Where kbgen is installed; its directory is put first on the agents' PATH (the gpu-docker hook calls kbgen). Example: --kbgen-path /opt/kbgen/bin/kbgen"`
	User            string `default:"buildkite-agent" placeholder:"USER" help:"The user the agents run as; it must be in the docker group. Example: --user buildkite-agent"`
	AllowProfiling  bool   `help:"NVIDIA: write /etc/modprobe.d/kbgen-nvidia-profiling.conf (NVreg_RestrictProfilingToAdminUsers=0) so ncu works in profile-mode steps, which run as uid 1000 without capabilities. The trade-off: every user of the node may read GPU performance counters, a side channel on other users' kernels (NVIDIA security bulletin CVE-2018-6260); takes effect when the driver reloads. kbgen doctor shows the setting."`
	AllowGPUReset   bool   `name:"allow-gpu-reset" help:"Write /etc/sudoers.d/kbgen-gpu-reset (0440, checked with visudo -c first) letting the agents' user run, as root, exactly each GPU's reset (/usr/bin/nvidia-smi --gpu-reset -i UUID, /opt/rocm/bin/amd-smi reset -g PCI -G) and set KBGEN_GPU_RESET=1 for every agent: a leased GPU that fails the clean-GPU check (memory held, a machine Xid, new ECC errors, a pending row remap, an amdgpu timeout) is reset and checked again before its job exits 75. A GPU with a process on it is never reset. docs/isolation.md."`
}

// Help is shown after the flags.
func (c *NodeInstallCmd) Help() string {
	return `Writes, for each planned agent (see kbgen node plan):
  /etc/buildkite-agent/kbgen/gpuN/buildkite-agent.cfg   name %hostname-gpuN, tags queue=Q,gpu-index=N
  /etc/buildkite-agent/kbgen/gpuN/hooks/environment     exports the placement kbgen sandbox enforces
  /etc/buildkite-agent/kbgen/gpuN/agent.env             the same placement, for systemd and doctor
and once: /etc/systemd/system/buildkite-agent-gpu@.service, kbgen-agents.slice,
/etc/buildkite-agent/kbgen/plan.json, token.env (0600), verification.jwks,
and the housekeeping drop-ins that confine the OS services, dockerd,
containerd, the agents and kbgen to the CPUs no agent owns: on cgroup v2
AllowedCPUs= in system.slice.d/ and user.slice.d/ plus kbgen-jobs.slice for
the step containers (KERNELBOT_CGROUP_PARENT); on cgroup v1 CPUAffinity= in
/etc/systemd/system.conf.d/ (takes effect after systemctl daemon-reexec).
Files already right are left alone, so running it twice changes nothing.
It does not start anything: setup-node.sh (or you) runs
  systemctl daemon-reload && systemctl enable --now buildkite-agent-gpu@{0..7}

  kbgen node install --queue nvidia-h100 --token-file /root/agent-token
  kbgen node install --queue amd-mi300 --root /tmp/stage --dry-run

With --control it writes Kernelbot's control agent instead (a machine
without GPUs): /etc/buildkite-agent/kbgen/control/ (buildkite-agent.cfg
with queue=kernelbot-control, hooks/environment exporting KBGEN_SIGNING_KEY
and KBGEN_VENDORS, hooks/checkout that skips the checkout,
signing-key.jwks 0600 owned by --user, vendors.yaml with --vendors),
token.env and /etc/systemd/system/buildkite-agent-control.service:

  kbgen keygen --private-out signing.jwks --public-out verification.jwks
  kbgen node install --control --signing-key signing.jwks --root stage-control --dry-run`
}

func (c *NodeInstallCmd) Run(g *Globals) error {
	if err := c.checkFlags(); err != nil {
		return exitcode.With(exitcode.Usage, err)
	}
	if c.Control {
		return c.runControl(g)
	}
	rep, err := node.Install(context.Background(), node.InstallRequest{
		Source: c.source(g, c.Queue),
		Inputs: node.Inputs{TokenFile: c.TokenFile, EnvToken: g.Getenv(contract.EnvAgentToken), VerificationKey: c.VerificationKey, Plugin: c.Plugin, Root: c.Root},
		Options: node.InstallOptions{AgentBinary: c.AgentBinary, User: c.User, KbgenPath: c.KbgenPath, AllowProfiling: c.AllowProfiling, AllowGPUReset: c.AllowGPUReset,
			Hostname: agentHostname()},
		DryRun: c.DryRun,
	})
	if rep != nil {
		rep.Write(g.Stdout, g.Stderr)
	}
	return err
}

// NodeEnvCmd prints one agent's placement.
type NodeEnvCmd struct {
	machineFlags  `embed:""`
	GPUIndex      int    `required:"" placeholder:"N" help:"The GPU whose agent's placement to print. Example: --gpu-index 3"`
	Root          string `default:"/" placeholder:"DIR" help:"Read the plan installed under DIR (from kbgen node install); when none is installed the machine is planned afresh with the flags above. Example: --root /tmp/stage"`
	Queue         string `placeholder:"Q" help:"The queue whose step to reproduce when no plan is installed (an installed plan names its own). Example: --queue nvidia-h100"`
	PlacementOnly bool   `help:"Print only the placement the agent's environment hook exports, not the step and job that reproduce a job by hand."`
}

func (c *NodeEnvCmd) Help() string {
	return `Prints, as shell exports, what kbgen sandbox reads when an eval step runs on
this agent: the placement the agent's environment hook exports (its GPU, cpuset,
NUMA node, memory), then the eval step of the node's queue as the generator
makes it (the registry's image and limits, as BUILDKITE_PLUGINS), the queue tag,
and the built-in example job in test mode as KERNELBOT_PAYLOAD. So one line
reproduces a job by hand on the node, no Buildkite needed:

  eval "$(kbgen node env --gpu-index 3)" && kbgen sandbox --dry-run -- kbgen run

drop --dry-run to run it (the runner image must be pulled; result.json lands in
the current directory). --placement-only prints the hook's exports alone.
The same from a staged install, on any machine:

  kbgen node install --queue nvidia-h100 --sysfs node/testdata/h100x8/sys --nvidia-smi node/testdata/h100x8/nvidia-smi.csv --root stage
  eval "$(kbgen node env --gpu-index 3 --root stage)" && kbgen sandbox --no-gpu --dry-run -- kbgen run`
}

func (c *NodeEnvCmd) Run(g *Globals) error {
	env, note, err := jobenv.ForAgent(context.Background(), jobenv.Request{
		Root: c.Root, Source: c.source(g, c.Queue), GPUIndex: c.GPUIndex, PlacementOnly: c.PlacementOnly,
	})
	if note != nil {
		fmt.Fprintf(g.Stderr, "kbgen: note: placement only: %v\n", note)
	}
	for _, e := range env {
		fmt.Fprintf(g.Stdout, "export %s=%s\n", e.Name, shellquote.Quote(e.Value))
	}
	return err
}
