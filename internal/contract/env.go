package contract

// Build env: set by `kbgen submit` (or the Kernelbot backend) on the
// Buildkite build, read by the bootstrap step (`kbgen generate`). The eval
// step carries EnvQueue and EnvRunID on in its own (signed) env.
const (
	// EnvPayload is the encoded job, base64(zlib(json)); a payload too large
	// for one variable is split into EnvPayload_0..N (payload.SplitEnv).
	EnvPayload = "KERNELBOT_PAYLOAD"
	// EnvPayloadSHA256 is the hex SHA-256 of the whole encoded payload, so
	// the reader can check that the pieces were reassembled intact.
	EnvPayloadSHA256 = "KERNELBOT_PAYLOAD_SHA256"
	// EnvRunID names the run; kept in the build's meta-data run_id.
	EnvRunID = "KERNELBOT_RUN_ID"
	// EnvQueue is the queue (vendor) the job runs on. In the eval step's
	// signed env it binds the step to that queue (signing.CheckQueueBinding).
	EnvQueue = "KERNELBOT_QUEUE"
	// EnvImage optionally overrides the vendor's runner image.
	EnvImage = "KERNELBOT_IMAGE"
	// EnvPriority optionally overrides the eval step's Buildkite priority.
	EnvPriority = "KERNELBOT_PRIORITY"
	// EnvUser is the submitter's fair-share key (one running step per user
	// and queue).
	EnvUser = "KERNELBOT_USER"
	// EnvBootstrapQueue routes the bootstrap step (kbgen generate) to a
	// queue of Kernelbot's own control agents, the only hosts that hold the
	// pipeline signing key; unset, it runs on the job's queue.
	EnvBootstrapQueue = "KERNELBOT_BOOTSTRAP_QUEUE"
	// EnvTargetAgent optionally pins the eval step to one agent: the
	// step's `agents:` gets AgentTag=<its value> beside the queue. kbgen
	// serve sets it for canaries and re-measurements (fleet/canary,
	// fleet/verify); the value is the agent's name.
	EnvTargetAgent = "KBGEN_TARGET_AGENT"
)

// AgentTag is the agent tag `kbgen node install` gives each agent, its
// value the agent's name (host name, "-", agent id), so that one step can
// target one agent (Buildkite agent targeting:
// https://buildkite.com/docs/agent/v3/cli-start#agent-targeting).
const AgentTag = "kbgen-agent"

// Placement env: exported by each agent's `environment` hook (written by
// `kbgen node install`), read by `kbgen sandbox`. They say *where* this
// agent's jobs run; the pipeline never sets them.
const (
	// EnvGPUIndex is the index of the GPU this agent owns, or the
	// comma-separated indexes of a multi-GPU agent's set ("0,1,2,3")
	// (informational; the UUID or render node is what isolates).
	EnvGPUIndex = "KERNELBOT_GPU_INDEX"
	// EnvGPUUUID is the NVIDIA GPU's UUID ("GPU-xxxxxxxx-xxxx-...", or a
	// MIG instance's "MIG-…"), passed as `--gpus device=<uuid>`; for a
	// multi-GPU agent the comma-separated UUIDs of its set, passed as
	// `--gpus '"device=<uuid>,<uuid>"'`. Indexes are not stable across
	// reboots and driver reloads; UUIDs are.
	EnvGPUUUID = "KERNELBOT_GPU_UUID"
	// EnvGPURenderNode is the AMD GPU's DRM render node
	// ("/dev/dri/renderD130"), or a multi-GPU agent's comma-separated
	// render nodes, passed with /dev/kfd as the only devices.
	EnvGPURenderNode = "KERNELBOT_GPU_RENDER_NODE"
	// EnvCPUSet is the agent's cpuset, Linux list syntax ("2-15,98-111"),
	// all on the GPU's NUMA node.
	EnvCPUSet = "KERNELBOT_CPUSET"
	// EnvMems is the agent's NUMA node(s), list syntax ("0").
	EnvMems = "KERNELBOT_MEMS"
	// EnvMemory is the agent's memory cap, docker syntax ("200g").
	EnvMemory = "KERNELBOT_MEMORY"
	// EnvPidsMax optionally caps the step's pids-limit (an integer); when
	// unset the sandbox's DefaultPidsLimit is the cap.
	EnvPidsMax = "KERNELBOT_PIDS_MAX"
	// EnvShmMax optionally caps the step's shm-size (docker syntax); when
	// unset the cap is the agent's memory (shm is charged to it anyway).
	EnvShmMax = "KERNELBOT_SHM_MAX"
	// EnvCgroupParent optionally names the cgroup the step's container is
	// created under (docker --cgroup-parent). On a cgroup v2 node the
	// housekeeping drop-ins confine system.slice to the housekeeping CPUs,
	// so containers must live elsewhere: `kbgen node install` writes
	// kbgen-jobs.slice and exports its name here.
	EnvCgroupParent = "KERNELBOT_CGROUP_PARENT"
)

// kbgen's own settings: the default of a flag, or a switch between two of
// kbgen's processes. A flag, where there is one, wins over its variable.
const (
	// EnvVendors is a vendor registry file replacing the built-in one
	// (--vendors).
	EnvVendors = "KBGEN_VENDORS"
	// EnvSigningKey is the private JWKS `kbgen generate` signs steps with
	// (--signing-key).
	EnvSigningKey = "KBGEN_SIGNING_KEY"
	// EnvSigningKeyID picks the key to sign with when the JWKS holds
	// several (--signing-key-id).
	EnvSigningKeyID = "KBGEN_SIGNING_KEY_ID"
	// EnvAgentSignature set to 1 also gives each step Buildkite's own
	// `signature` (--agent-signature), for agents that verify it
	// (v3.53 and newer). Off by default: buildkite-agent v3.52.1 refuses
	// every step that carries one and has a plugin.
	EnvAgentSignature = "KBGEN_AGENT_SIGNATURE"
	// EnvDefaultBootstrapQueue is `kbgen submit --bootstrap-queue`'s
	// default; submit sends it to the build as EnvBootstrapQueue.
	EnvDefaultBootstrapQueue = "KBGEN_BOOTSTRAP_QUEUE"
	// EnvRequireGPU=1 (or true) is `kbgen run --require-gpu`.
	EnvRequireGPU = "KBGEN_REQUIRE_GPU"
	// EnvInSandbox=1 tells the runner it runs in a container the sandbox
	// started (so the sandbox already checked the step's routing).
	EnvInSandbox = "KBGEN_SANDBOX"
	// EnvStepSignature is kbgen's own signature of the eval step: a compact
	// JWS over signing.StepClaim (command, plugins, gpu-docker config, step
	// env, payload SHA-256, queue), put in the step's env by `kbgen
	// generate --signing-key` and checked by `kbgen sandbox` on a node that
	// sets EnvVerificationKey. buildkite-agent v3.52.1 cannot verify
	// Buildkite's own step signature on a step with a plugin (fixed in
	// v3.53.0); this one is verified.
	EnvStepSignature = "KBGEN_STEP_SIGNATURE"
	// EnvVerificationKey is the public JWKS file `kbgen sandbox` verifies
	// EnvStepSignature with. The agent's environment hook (written by
	// `kbgen node install --verification-key`) exports it, after the step's
	// env, so a step cannot turn the check off; unset, steps are not
	// checked.
	EnvVerificationKey = "KBGEN_VERIFICATION_KEY"
	// EnvGPUCount is how many GPUs the sandbox gave the container, set
	// in the container's env: the runner's SystemInfo.device_count and
	// POPCORN_GPUS (rocm-smi inside a container lists every card of the
	// host, because sysfs is not namespaced).
	EnvGPUCount = "KBGEN_GPU_COUNT"
	// EnvLeaseDir is the node's GPU lease directory, one lock file per
	// GPU shared by every agent of the node (default /run/kbgen, the
	// agents' systemd RuntimeDirectory).
	EnvLeaseDir = "KBGEN_LEASE_DIR"
	// EnvLeaseWait bounds how long `kbgen sandbox` waits for its GPUs
	// (a Go duration, default 15m) before it exits 75.
	EnvLeaseWait = "KBGEN_LEASE_WAIT"
	// EnvGPUReset=1 lets `kbgen sandbox` reset a leased GPU that failed
	// the clean-GPU check (sudo -n, the node's sudoers line; then checks
	// again). Exported by the agent's environment hook when `kbgen node
	// install --allow-gpu-reset` wrote the sudoers file; a step that sets
	// it itself gains nothing, since sudo refuses without that file.
	EnvGPUReset = "KBGEN_GPU_RESET"
	// EnvSandboxNoGPU=1 is `kbgen sandbox --no-gpu` from the environment, so
	// an agent-driven test can turn the GPU flags off through the hook. It
	// only ever grants less.
	EnvSandboxNoGPU = "KBGEN_SANDBOX_NO_GPU"
	// EnvNVMLHelper is the kbgen-nvml helper to read NVML through (a path),
	// or "off" for nvidia-smi only; unset, kbgen looks beside its own
	// executable (package nvmlhelper). Tests and operators set it; inside
	// the sandbox the helper is always the one mounted beside kbgen.
	EnvNVMLHelper = "KBGEN_NVML_HELPER"
	// EnvGeneratorVersion is the version of the kbgen that generated the
	// eval step (internal/version), in the step's env; `kbgen sandbox`
	// warns in the job log when its own version differs (a control agent
	// or node left behind by a release). Informational: it decides nothing.
	EnvGeneratorVersion = "KBGEN_GENERATOR_VERSION"
)

// Buildkite's variables that kbgen reads. The agent sets the job's; the
// REST API's are the operator's.
const (
	// EnvJobID is set by the agent in every job; its absence means "not in
	// a Buildkite job" (a local or hand run).
	EnvJobID = "BUILDKITE_JOB_ID"
	// EnvAgentName is the agent's name, for the GPU lease's holder line.
	EnvAgentName = "BUILDKITE_AGENT_NAME"
	// EnvAgentQueue is the agent's queue tag as the agent exports it to
	// the job (absent for the "default" queue).
	EnvAgentQueue = "BUILDKITE_AGENT_META_DATA_QUEUE"
	// EnvRepo is the repository URL as the agent sees it; pipeline
	// signatures bind it.
	EnvRepo = "BUILDKITE_REPO"
	// EnvBuildPath is the agent's build directory (the sandbox's default
	// stage lives under it).
	EnvBuildPath = "BUILDKITE_BUILD_PATH"
	// EnvPlugins is the step's plugin list as JSON.
	EnvPlugins = "BUILDKITE_PLUGINS"
	// EnvAgentToken is the agent registration token (`kbgen node install`).
	EnvAgentToken = "BUILDKITE_AGENT_TOKEN"
	// EnvAPIToken, EnvAPIURL, EnvOrg and EnvPipeline reach the REST API
	// (`kbgen submit`, `wait`, `result`, `queues`).
	EnvAPIToken = "BUILDKITE_API_TOKEN"
	EnvAPIURL   = "BUILDKITE_API_URL"
	EnvOrg      = "BUILDKITE_ORG"
	EnvPipeline = "BUILDKITE_PIPELINE"
	// EnvBuildkiteRetryCount is how many times the agent's job was
	// retried (0 on the first attempt).
	EnvBuildkiteRetryCount = "BUILDKITE_RETRY_COUNT"
)

// The noise policy on its way from the vendor registry to the runner
// (package noise).
const (
	// EnvNoisePolicy is the queue's noise policy, noisepolicy.Policy.String():
	// set in the eval step's env by the generator, passed into the
	// container by the sandbox, read by `kbgen run`.
	EnvNoisePolicy = "KBGEN_NOISE_POLICY"
	// EnvRetryCount is the job's BUILDKITE_RETRY_COUNT as the sandbox
	// passes it into the container (no BUILDKITE_* variable enters), so
	// the runner retries external noise only once.
	EnvRetryCount = "KBGEN_RETRY_COUNT"
)

// EnvAgentBinary names the real buildkite-agent binary that `kbgen doctor
// --e2e` and the tests start (bkagent.Installed), where it is not
// buildkite-agent on PATH.
const EnvAgentBinary = "KBGEN_BUILDKITE_AGENT"
