package fakebuildkite

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"

	"github.com/buildkite/go-pipeline"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// What the REST API says of the organization beside builds, for `kbgen
// doctor --buildkite`: the pipeline's settings (pages/apis/rest_api/
// pipelines.md, "Get a pipeline"), the token itself (access_token.md,
// "Get the current token") and each endpoint's required scope, as those
// pages give it ("Required scope: read_pipelines"). A token without the
// scope is answered 403 with the message the API sends (quoted in
// buildkite/cli#566: "Your access token doesn't have the read_builds
// scope"); GET /v2/access-token needs none.

// PipelineSettings are the pipeline's settings as the REST API shows
// them.
type PipelineSettings struct {
	// Configuration is the settings steps (YAML), the REST
	// `configuration` of a YAML pipeline: what every build starts from.
	Configuration             string
	DefaultBranch             string
	SkipQueuedBranchBuilds    bool
	CancelRunningBranchBuilds bool
	// Provider is provider.id ("github", "gitlab", "bitbucket", "git").
	Provider string
	// TriggerMode is provider.settings.trigger_mode of a GitHub pipeline:
	// code, deployment, fork or none.
	TriggerMode       string
	BuildPullRequests bool
	ClusterID         string
	Archived          bool
}

// NewPipelineSettings are a pipeline's settings as Buildkite creates it
// from a GitHub repository (pipelines.md, "Create a YAML pipeline": its
// response; the steps are the one upload step the docs suggest): builds
// on every push and pull request.
func NewPipelineSettings() PipelineSettings {
	return PipelineSettings{
		Configuration: "steps:\n  - command: \"buildkite-agent pipeline upload\"\n",
		DefaultBranch: "main", Provider: "github", TriggerMode: "code", BuildPullRequests: true,
		ClusterID: "42f1a7da-812d-4430-93d8-1cc7c33a6bcf",
	}
}

// SetPipelineSettings replaces the pipeline's settings.
func (s *Server) SetPipelineSettings(p PipelineSettings) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.settings = p
}

// SetTokenScopes gives token exactly scopes (a token not named here has
// kbgen's: contract.APIScopes).
func (s *Server) SetTokenScopes(token string, scopes ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.scopes[token] = append([]string{}, scopes...)
}

func (s *Server) scopesOf(token string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sc, ok := s.scopes[token]; ok {
		return sc
	}
	return contract.APIScopeNames()
}

// scopeFor is the scope a request under /v2/organizations/ORG/ needs, as
// each endpoint's page gives it; "" for paths the stand-in does not
// serve (they are answered 404).
func scopeFor(method string, parts []string) string {
	switch {
	case len(parts) == 1 && parts[0] == "agents":
		return "read_agents"
	case len(parts) == 3 && parts[0] == "agents":
		return "write_agents" // agents.md: pause, resume, stop
	case len(parts) == 2 && parts[0] == "pipelines" && method == http.MethodGet:
		return "read_pipelines"
	case len(parts) < 3 || parts[0] != "pipelines" || parts[2] != "builds":
		return ""
	case slices.Contains(parts, "artifacts"):
		return "read_artifacts"
	case method == http.MethodGet:
		return "read_builds"
	}
	return "write_builds"
}

// permitted answers 403 when the request's token lacks scope.
func (s *Server) permitted(w http.ResponseWriter, r *http.Request, scope string) bool {
	if scope == "" || slices.Contains(s.scopesOf(bearer(r)), scope) {
		return true
	}
	writeJSON(w, http.StatusForbidden, map[string]string{"message": "Your access token doesn't have the " + scope + " scope"})
	return false
}

// serveAccessToken answers GET /v2/access-token (access_token.md).
func (s *Server) serveAccessToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"message": "method not allowed"})
		return
	}
	s.mu.Lock()
	user := s.tokens[bearer(r)]
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{
		"uuid": "b63254c0-3271-4a98-8270-7cfbd6c2f14e", "scopes": s.scopesOf(bearer(r)),
		"description": "kbgen", "created_at": "2026-07-16 06:07:42 UTC", "expires_at": nil,
		"user": map[string]string{"name": user, "email": user + "@example.com"},
	})
}

// servePipeline answers GET /v2/organizations/ORG/pipelines/SLUG: the
// fields of pipelines.md's data model that kbgen reads, with `steps`
// derived from the configuration as a YAML pipeline's are.
func (s *Server) servePipeline(w http.ResponseWriter, slug string) {
	if slug != s.Pipeline {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "No pipeline found"})
		return
	}
	s.mu.Lock()
	p := s.settings
	s.mu.Unlock()
	api := strings.TrimSuffix(s.URL(), "/") + "/v2/organizations/" + s.Org + "/pipelines/" + slug
	var archived any
	if p.Archived {
		archived = "2026-11-01T00:00:00.000Z"
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"id": "849411f9-9e6d-4739-a0d8-e247088e9b52", "url": api, "web_url": "https://buildkite.com/" + s.Org + "/" + slug,
		"name": slug, "slug": slug, "repository": "https://github.com/gpu-mode/kbgen.git", "cluster_id": p.ClusterID,
		"default_branch": p.DefaultBranch, "branch_configuration": nil,
		"skip_queued_branch_builds": p.SkipQueuedBranchBuilds, "skip_queued_branch_builds_filter": nil,
		"cancel_running_branch_builds": p.CancelRunningBranchBuilds, "cancel_running_branch_builds_filter": nil,
		// The webhook URL only with write_pipelines (pipelines.md).
		"provider":   map[string]any{"id": p.Provider, "webhook_url": "", "settings": providerSettings(p)},
		"builds_url": api + "/builds", "archived_at": archived, "visibility": "private", "env": map[string]any{},
		"configuration": p.Configuration, "steps": legacySteps(p.Configuration),
	})
}

func providerSettings(p PipelineSettings) map[string]any {
	out := map[string]any{"repository": "gpu-mode/kbgen", "build_pull_requests": p.BuildPullRequests, "build_branches": true,
		"build_tags": false, "publish_commit_status": true}
	if p.Provider == "github" || p.Provider == "github_enterprise" {
		out["trigger_mode"] = p.TriggerMode
	}
	return out
}

// legacySteps is `steps` of a YAML pipeline: its command steps in the
// visual editor's shape (pipelines.md's examples: agents as
// agent_query_rules, [] for none).
func legacySteps(config string) []any {
	out := []any{}
	p, err := pipeline.Parse(strings.NewReader(config))
	if err != nil {
		return out
	}
	for _, st := range p.Steps {
		cmd, ok := st.(*pipeline.CommandStep)
		if !ok {
			continue
		}
		b, _ := json.Marshal(cmd)
		var f struct {
			Label   string          `json:"label"`
			Agents  json.RawMessage `json:"agents"`
			Timeout any             `json:"timeout_in_minutes"`
		}
		_ = json.Unmarshal(b, &f)
		out = append(out, map[string]any{"type": "script", "name": f.Label, "command": cmd.Command,
			"env": map[string]any{}, "timeout_in_minutes": f.Timeout, "agent_query_rules": queryRules(f.Agents)})
	}
	return out
}

// queryRules is a step's agents (a map or a key=value list) as
// agent_query_rules.
func queryRules(raw json.RawMessage) []string {
	rules := []string{}
	var m map[string]any
	if json.Unmarshal(raw, &m) == nil {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			rules = append(rules, fmt.Sprintf("%s=%v", k, m[k]))
		}
		return rules
	}
	_ = json.Unmarshal(raw, &rules)
	return rules
}
