package contract

// The environment of kbgen serve and of kbgen submit --server.
const (
	// EnvServer is kbgen submit --server: the service's URL.
	EnvServer = "KBGEN_SERVER"
	// EnvServerToken is the bearer token clients of kbgen serve send and
	// the service requires (on TCP).
	EnvServerToken = "KBGEN_SERVER_TOKEN"
	// EnvWebhookSecret verifies X-Buildkite-Signature on webhooks.
	EnvWebhookSecret = "BUILDKITE_WEBHOOK_SECRET"
	// EnvWebhookToken verifies X-Buildkite-Token on webhooks.
	EnvWebhookToken = "BUILDKITE_WEBHOOK_TOKEN"
)

// EnvViewToken is kbgen serve's read-only bearer token: it reads /metrics
// (and the dashboard), never submits or cancels.
const EnvViewToken = "KBGEN_VIEW_TOKEN"

// EnvSandboxExit is the gpu-docker hook's word to `kbgen run --publish`:
// the sandbox's exit status, which the run's facts carry to kbgen serve
// (75: the machine's fault; fleet/runfacts).
const EnvSandboxExit = "KBGEN_SANDBOX_EXIT"

// EnvDatabaseURL is kbgen serve's PostgreSQL DSN (--database-url): the
// environment keeps its password out of the process list.
const EnvDatabaseURL = "KBGEN_DATABASE_URL"
