package contract

// Step keys of the two jobs of a kbgen build: the bootstrap step of
// .buildkite/pipeline.yml that uploads the pipeline, and the eval step that
// pipeline adds. `kbgen submit` finds the eval job (and its result) by key.
const (
	BootstrapStepKey = "bootstrap"
	EvalStepKey      = "eval"
)

// ControlQueue is the queue of Kernelbot's control agents: the machines
// without GPUs that hold the signing key and run the bootstrap step of the
// pipeline's settings (.buildkite/pipeline-settings.yml, which names it;
// a test keeps the two equal). `kbgen node install --control` tags its
// agent with it.
const ControlQueue = "kernelbot-control"

// ResultFile is the name of Kernelbot's FullResult JSON everywhere it
// travels: the runner's default --out, the sandbox's out directory, the
// eval step's artifact path, and what `kbgen submit` downloads.
const ResultFile = "result.json"

// ProfileDir is the directory beside ResultFile that holds a profile run's
// traces (profile_data/<run key>.zip), uploaded as artifacts under that
// name.
const ProfileDir = "profile_data"

// Build meta-data keys kbgen sets on every build it creates, and finds
// builds by: `kbgen submit` re-attaches to a run by MetaDataRunID, and
// `kbgen queues`/serve count builds per MetaDataQueue.
const (
	MetaDataRunID = "run_id"
	MetaDataQueue = "queue"
)

// MetaDataUploaded is set (to the bootstrap job's id) by `kbgen generate
// --upload` once the build's pipeline is uploaded: a retried bootstrap
// finds it and uploads nothing, so a build never gets a second eval step.
const MetaDataUploaded = "kbgen_uploaded"

// NoiseFile is the noise record's name beside ResultFile: written by
// `kbgen run` after a timed run (package noise), copied out by the
// sandbox, uploaded with the result.
const NoiseFile = "noise.json"

// The priorities a build's KERNELBOT_PRIORITY may ask for: -PriorityMax
// to PriorityMax (Buildkite runs higher numbers first). PriorityLowest is
// the last of all: kbgen serve's canaries, which must never take an agent
// a waiting job could have.
const (
	PriorityMax    = 100
	PriorityLowest = -PriorityMax
)
