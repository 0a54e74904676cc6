package fakebuildkite

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestOrgEndpoints: the access token, the pipeline and each endpoint's
// scope, as the REST API pages document them.
func TestOrgEndpoints(t *testing.T) {
	t.Parallel()
	s := New(nil)
	defer s.Close()
	s.AddToken("bkua_narrow", "narrow")
	s.SetTokenScopes("bkua_narrow", "read_builds")
	tests := []struct {
		name, token, method, path string
		status                    int
		body                      string
	}{
		{"the token's scopes", s.Token, "GET", "/v2/access-token", 200, `"scopes":["read_builds","write_builds","read_artifacts","read_agents","read_pipelines"]`},
		{"a narrow token's scopes", "bkua_narrow", "GET", "/v2/access-token", 200, `"scopes":["read_builds"]`},
		{"the access token needs no scope", "bkua_narrow", "GET", "/v2/access-token", 200, `"name":"narrow"`},
		{"an unknown token", "bkua_nobody", "GET", "/v2/access-token", 401, "Authentication required"},
		{"a new pipeline's settings", s.Token, "GET", "/v2/organizations/gpu-mode/pipelines/kernelbot", 200, `"trigger_mode":"code"`},
		{"its configuration and steps", s.Token, "GET", "/v2/organizations/gpu-mode/pipelines/kernelbot", 200, `"steps":[{"agent_query_rules":[],"command":"buildkite-agent pipeline upload"`},
		{"an unknown pipeline", s.Token, "GET", "/v2/organizations/gpu-mode/pipelines/nosuch", 404, "No pipeline found"},
		{"read_pipelines", "bkua_narrow", "GET", "/v2/organizations/gpu-mode/pipelines/kernelbot", 403, "Your access token doesn't have the read_pipelines scope"},
		{"read_agents", "bkua_narrow", "GET", "/v2/organizations/gpu-mode/agents", 403, "read_agents scope"},
		{"write_builds", "bkua_narrow", "POST", "/v2/organizations/gpu-mode/pipelines/kernelbot/builds", 403, "write_builds scope"},
		{"read_artifacts", "bkua_narrow", "GET", "/v2/organizations/gpu-mode/pipelines/kernelbot/builds/1/artifacts", 403, "read_artifacts scope"},
		{"read_builds suffices to list", "bkua_narrow", "GET", "/v2/organizations/gpu-mode/pipelines/kernelbot/builds", 200, "[]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, s.API.URL+tc.path, strings.NewReader("{}"))
			req.Header.Set("Authorization", "Bearer "+tc.token)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			if resp.StatusCode != tc.status || !strings.Contains(string(b), tc.body) {
				t.Errorf("%s %s: %d %s; want %d with %s", tc.method, tc.path, resp.StatusCode, b, tc.status, tc.body)
			}
		})
	}
}

// TestLivePipelineSettings: a live server's pipeline shows the steps its
// builds start from as its configuration.
func TestLivePipelineSettings(t *testing.T) {
	t.Parallel()
	steps := "steps:\n  - command: kbgen generate --upload\n    agents:\n      queue: kernelbot-control\n"
	s, err := NewLive(Options{Pipeline: []byte(steps)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	req, _ := http.NewRequest("GET", s.URL()+"v2/organizations/gpu-mode/pipelines/kernelbot", nil)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Configuration string `json:"configuration"`
		Steps         []struct {
			AgentQueryRules []string `json:"agent_query_rules"`
		} `json:"steps"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
		t.Fatal(err)
	}
	if p.Configuration != steps || len(p.Steps) != 1 || len(p.Steps[0].AgentQueryRules) != 1 || p.Steps[0].AgentQueryRules[0] != "queue=kernelbot-control" {
		t.Errorf("pipeline: %+v; want the live steps and queue=kernelbot-control", p)
	}
}
