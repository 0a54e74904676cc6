package contract

// APIScope is a REST API token scope kbgen's token needs
// (buildkite/docs pages/apis/managing_api_tokens.md), and what for.
type APIScope struct {
	Name, For string
}

// APIScopes are the scopes of the token of kbgen submit, serve, queues
// and doctor --buildkite, and no more: docs/buildkite-setup.md lists
// them, `kbgen doctor --buildkite` checks the token has them, and the
// local Buildkite gives them to its tokens.
var APIScopes = []APIScope{
	{Name: "read_builds", For: "find, poll and list builds (submit, serve, queues)"},
	{Name: "write_builds", For: "create and cancel builds (submit, serve)"},
	{Name: "read_artifacts", For: "download result.json (submit, serve)"},
	{Name: "read_agents", For: "count agents per queue (queues, serve's queue view, doctor --buildkite)"},
	{Name: "read_pipelines", For: "read the pipeline's settings (doctor --buildkite)"},
}

// APIScopeNames are APIScopes' names, in order.
func APIScopeNames() []string {
	out := make([]string, len(APIScopes))
	for i, s := range APIScopes {
		out[i] = s.Name
	}
	return out
}
