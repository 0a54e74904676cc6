package bkdoctor

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/internal/fakebuildkite"
	"github.com/gpu-mode/kbgen/registry"
)

// documented sets the stand-in up as docs/buildkite-setup.md says: the
// settings steps verbatim, intermediate builds and triggers off, a
// connected agent on the control queue and on each vendor queue of
// testdata/vendors.yaml, Buildkite's default rate limits.
func documented(f *fakebuildkite.Server) {
	p := fakebuildkite.NewPipelineSettings()
	p.Configuration, p.TriggerMode, p.BuildPullRequests = SettingsSteps(contract.ControlQueue), "none", false
	f.SetPipelineSettings(p)
	f.SetAgents([]fakebuildkite.AgentSpec{
		{Name: "control-1", Version: "3.52.1", Queue: contract.ControlQueue},
		{Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100", BusyWith: "eval"},
		{Name: "mi300-gpu0", Version: "3.52.1", Queue: "amd-mi300"},
	})
	f.SetDefaultRateLimits()
}

// want is one check's expected verdict and words of its detail and fix.
type want struct {
	check  string
	level  Level
	detail string
	fix    string
}

func TestRun(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(*fakebuildkite.Server)
		want  []want
	}{
		{"the documented setup passes", func(*fakebuildkite.Server) {}, nil},
		{"a new pipeline's steps upload from the checkout", func(f *fakebuildkite.Server) {
			settings(f, func(p *fakebuildkite.PipelineSettings) {
				p.Configuration = fakebuildkite.NewPipelineSettings().Configuration
			})
		}, []want{{"settings steps", Fail, `"buildkite-agent pipeline upload", which uploads .buildkite/pipeline.yml`, "docs/buildkite-setup.md#the-pipeline"}}},
		{"bootstrap on a vendor queue", func(f *fakebuildkite.Server) {
			steps(f, strings.Replace(SettingsSteps(contract.ControlQueue), "queue: kernelbot-control", "queue: nvidia-h100", 1))
		}, []want{{"settings steps", Fail, "vendor queue nvidia-h100: vendor agents hold no signing key", "queue kernelbot-control"}}},
		{"bootstrap routed by the build env", func(f *fakebuildkite.Server) {
			steps(f, strings.Replace(SettingsSteps(contract.ControlQueue), "queue: kernelbot-control", `queue: "${KERNELBOT_BOOTSTRAP_QUEUE:-default}"`, 1))
		}, []want{{"settings steps", Fail, "comes from the build's env", "replace them"}}},
		{"bootstrap on no queue", func(f *fakebuildkite.Server) {
			steps(f, strings.Replace(SettingsSteps(contract.ControlQueue), "    agents:\n      queue: kernelbot-control\n", "", 1))
		}, []want{{"settings steps", Fail, "names no queue", "replace them"}}},
		{"a step beside the bootstrap", func(f *fakebuildkite.Server) {
			steps(f, SettingsSteps(contract.ControlQueue)+"  - command: make deploy\n    agents:\n      queue: nvidia-h100\n")
		}, []want{{"settings steps", Fail, `1 steps beside the bootstrap ("make deploy")`, "replace them"}}},
		{"retry rules that retry a timeout", func(f *fakebuildkite.Server) {
			steps(f, strings.Replace(SettingsSteps(contract.ControlQueue), "- exit_status: -1\n          signal_reason: none", "- exit_status: -1", 1))
		}, []want{{"settings steps", Fail, "differs from the documented step in retry", "replace them"}}},
		{"visual-editor steps", func(f *fakebuildkite.Server) { steps(f, "") },
			[]want{{"settings steps", Fail, "no YAML steps", "replace them"}}},
		{"skip intermediate builds", func(f *fakebuildkite.Server) {
			settings(f, func(p *fakebuildkite.PipelineSettings) { p.SkipQueuedBranchBuilds = true })
		}, []want{{"intermediate builds", Fail, "skip_queued_branch_builds", "turn off Skip intermediate builds"}}},
		{"cancel intermediate builds", func(f *fakebuildkite.Server) {
			settings(f, func(p *fakebuildkite.PipelineSettings) { p.CancelRunningBranchBuilds = true })
		}, []want{{"intermediate builds", Fail, "cancel_running_branch_builds", "Cancel intermediate builds"}}},
		{"GitHub pushes start builds", func(f *fakebuildkite.Server) {
			settings(f, func(p *fakebuildkite.PipelineSettings) { p.TriggerMode, p.BuildPullRequests = "code", true })
		}, []want{{"build triggers", Fail, `trigger_mode is "code"`, "set Trigger to None"}}},
		{"pull-request builds left on", func(f *fakebuildkite.Server) {
			settings(f, func(p *fakebuildkite.PipelineSettings) { p.BuildPullRequests = true })
		}, []want{{"build triggers", Warn, "Build pull requests is still on", "turn off Build pull requests"}}},
		{"archived pipeline", func(f *fakebuildkite.Server) {
			settings(f, func(p *fakebuildkite.PipelineSettings) { p.Archived = true })
		}, []want{{"pipeline", Fail, "archived", "unarchive"}}},
		{"a missing scope", func(f *fakebuildkite.Server) {
			f.SetTokenScopes(f.Token, "read_builds", "read_artifacts", "read_agents", "read_pipelines")
		}, []want{{"API token", Fail, "lacks write_builds (create and cancel builds", "add the missing scopes"}}},
		{"no read_pipelines: the token and the pipeline fail", func(f *fakebuildkite.Server) {
			f.SetTokenScopes(f.Token, "read_builds", "write_builds", "read_artifacts", "read_agents")
		}, []want{
			{"API token", Fail, "lacks read_pipelines", "add the missing scopes"},
			{"pipeline", Fail, "403 Forbidden: Your access token doesn't have the read_pipelines scope", "give the token the scope"},
		}},
		{"more scopes than needed", func(f *fakebuildkite.Server) {
			f.SetTokenScopes(f.Token, append(contract.APIScopeNames(), "write_pipelines")...)
		}, []want{{"API token", Warn, "and more: write_pipelines", "remove them"}}},
		{"no control agent", func(f *fakebuildkite.Server) {
			f.SetAgents([]fakebuildkite.AgentSpec{{Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100"}, {Name: "mi300-gpu0", Version: "3.52.1", Queue: "amd-mi300"}})
		}, []want{{"queue kernelbot-control", Fail, "no control agent connected", "docs/buildkite-setup.md#control-agents"}}},
		{"a vendor queue without agents", func(f *fakebuildkite.Server) {
			f.SetAgents([]fakebuildkite.AgentSpec{{Name: "control-1", Version: "3.52.1", Queue: contract.ControlQueue}, {Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100"}})
		}, []want{{"queue amd-mi300", Warn, "no agents connected", "kbgen node install --queue amd-mi300"}}},
		{"agents on an alias queue", func(f *fakebuildkite.Server) {
			f.SetAgents([]fakebuildkite.AgentSpec{{Name: "control-1", Version: "3.52.1", Queue: contract.ControlQueue},
				{Name: "h100-gpu0", Version: "3.52.1", Queue: "h100"}, {Name: "mi300-gpu0", Version: "3.52.1", Queue: "amd-mi300"}})
		}, []want{
			{"queue nvidia-h100", Warn, "no agents connected", ""},
			{"queue h100", Fail, "1 agent tagged with h100, an alias of nvidia-h100", "re-tag them queue=nvidia-h100"},
		}},
		{"agents on a queue kbgen never uses", func(f *fakebuildkite.Server) {
			f.SetAgents([]fakebuildkite.AgentSpec{{Name: "control-1", Version: "3.52.1", Queue: contract.ControlQueue},
				{Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100"}, {Name: "mi300-gpu0", Version: "3.52.1", Queue: "amd-mi300"},
				{Name: "stray", Version: "3.52.1", Queue: "default-queue"}})
		}, []want{{"queue default-queue", Warn, "no kbgen step is routed to (stray)", "tag them with a registry queue"}}},
		{"an agent too old to see a cancel", func(f *fakebuildkite.Server) {
			f.SetAgents([]fakebuildkite.AgentSpec{{Name: "control-1", Version: "3.50.0", Queue: contract.ControlQueue},
				{Name: "h100-gpu0", Version: "3.52.1", Queue: "nvidia-h100"}, {Name: "mi300-gpu0", Version: "3.52.1", Queue: "amd-mi300"}})
		}, []want{{"agent versions", Fail, "control-1 (3.50.0)", "v3.52.1"}}},
		{"a user limit under serve's budget", func(f *fakebuildkite.Server) { f.SetUserRateLimit(40) },
			[]want{{"rate limits", Fail, "--user-budget 45 is not under the user's 40", "--user-budget 35"}}},
		{"an organization limit under serve's budget", func(f *fakebuildkite.Server) { f.SetRateLimit(80) },
			[]want{{"rate limits", Fail, "--api-budget 100 is over the organization's 80", "--api-budget 40"}}},
		{"no rate-limit headers", func(f *fakebuildkite.Server) { f.SetRateLimit(0); f.SetUserRateLimit(0) },
			[]want{{"rate limits", Warn, "no RateLimit headers", "Settings → Quotas"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakebuildkite.New(nil)
			defer f.Close()
			documented(f)
			tc.setup(f)
			checks, err := Run(context.Background(), config(t, f, f.Token, f.Pipeline))
			if err != nil {
				t.Fatal(err)
			}
			expect(t, checks, tc.want)
		})
	}
}

// TestRunTokens: with the other tokens kbgen serve rotates, each token's
// scopes are checked, and that they are different users'.
func TestRunTokens(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		setup func(*fakebuildkite.Server)
		want  []want
	}{
		{"two tokens of two users", func(f *fakebuildkite.Server) { f.AddToken("bkua_second", "second") },
			[]want{{"token users", Pass, "2 tokens of 2 different users", ""}}},
		{"two tokens of one user", func(f *fakebuildkite.Server) { f.AddToken("bkua_second", fakebuildkite.DefaultUser) },
			[]want{{"token users", Fail, "two tokens belong to kbgen@example.com", "a different Buildkite user"}}},
		{"the second token lacks a scope", func(f *fakebuildkite.Server) {
			f.AddToken("bkua_second", "second")
			f.SetTokenScopes("bkua_second", "read_builds", "read_artifacts", "read_agents", "read_pipelines")
		}, []want{{"API token 2", Fail, `user "second"'s token lacks write_builds`, "add the missing scopes"}, {"token users", Pass, "", ""}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := fakebuildkite.New(nil)
			defer f.Close()
			documented(f)
			tc.setup(f)
			cfg := config(t, f, f.Token, f.Pipeline)
			cfg.Others = []*client.Client{config(t, f, "bkua_second", f.Pipeline).Client}
			checks, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			expect(t, checks, tc.want)
		})
	}
}

// expect: each wanted check has its level and words; every other check
// passes.
func expect(t *testing.T, checks []Check, wants []want) {
	t.Helper()
	seen := map[string]bool{}
	for _, w := range wants {
		c, ok := find(checks, w.check)
		if !ok {
			t.Fatalf("no check %q in %+v", w.check, checks)
		}
		seen[w.check] = true
		if c.Level != w.level || !strings.Contains(c.Detail, w.detail) || !strings.Contains(c.Fix, w.fix) {
			t.Errorf("%s: %s %q, fix %q; want %s with %q, fix with %q", w.check, c.Level, c.Detail, c.Fix, w.level, w.detail, w.fix)
		}
	}
	for _, c := range checks {
		if !seen[c.Name] && c.Level != Pass {
			t.Errorf("%s: %s %q (fix %q); want PASS", c.Name, c.Level, c.Detail, c.Fix)
		}
	}
}

func find(checks []Check, name string) (Check, bool) {
	for _, c := range checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

func settings(f *fakebuildkite.Server, change func(*fakebuildkite.PipelineSettings)) {
	p := fakebuildkite.NewPipelineSettings()
	p.Configuration, p.TriggerMode, p.BuildPullRequests = SettingsSteps(contract.ControlQueue), "none", false
	change(&p)
	f.SetPipelineSettings(p)
}

func steps(f *fakebuildkite.Server, yaml string) {
	settings(f, func(p *fakebuildkite.PipelineSettings) { p.Configuration = yaml })
}

func config(t *testing.T, f *fakebuildkite.Server, token, pipeline string) Config {
	t.Helper()
	reg, err := registry.Load(filepath.Join("testdata", "vendors.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.Options{APIURL: f.URL(), Org: f.Org, Pipeline: pipeline, Token: token,
		Retry: client.Retry{Attempts: 1, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond, MaxRateLimitWait: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Client: c, Registry: reg, APIBudget: 100, UserBudget: 45}
}

// TestRunRefused: answers that refuse fail the checks they concern with
// the fix for that refusal; no answer at all is an UnreachableError.
func TestRunRefused(t *testing.T) {
	t.Parallel()
	f := fakebuildkite.New(nil)
	defer f.Close()
	documented(f)
	t.Run("unknown pipeline", func(t *testing.T) {
		checks, err := Run(context.Background(), config(t, f, f.Token, "nosuch"))
		if err != nil {
			t.Fatal(err)
		}
		expect(t, checks, []want{{"pipeline", Fail, "404 Not Found: No pipeline found", "check --org and --pipeline"}})
	})
	t.Run("revoked token", func(t *testing.T) {
		checks, err := Run(context.Background(), config(t, f, "bkua_revoked", f.Pipeline))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"API token", "pipeline", "agents"} {
			if c, _ := find(checks, name); c.Level != Fail || !strings.Contains(c.Fix, "revoked, expired or mistyped") {
				t.Errorf("%s: %+v; want FAIL naming a revoked token", name, c)
			}
		}
	})
	t.Run("Buildkite unreachable", func(t *testing.T) {
		down := fakebuildkite.New(nil)
		cfg := config(t, down, down.Token, down.Pipeline)
		down.Close()
		_, err := Run(context.Background(), cfg)
		if ue := (*UnreachableError)(nil); !errors.As(err, &ue) {
			t.Fatalf("Run against a closed server: %v; want an UnreachableError", err)
		}
	})
}

// TestSettingsSteps: the steps doctor compares against are one bootstrap
// on the queue asked for (kbgen's TestPipelineSettings keeps the file and
// docs/buildkite-setup.md's block equal).
func TestSettingsSteps(t *testing.T) {
	t.Parallel()
	for _, q := range []string{contract.ControlQueue, "ops-control"} {
		got, err := stepMaps(SettingsSteps(q))
		if err != nil || len(got) != 1 || !isBootstrap(got[0]) || agentsOf(got[0])["queue"] != q {
			t.Errorf("SettingsSteps(%q): %v, %v; want one bootstrap on %s", q, got, err, q)
		}
	}
}

// TestRunCost: a run costs three requests of the token's user's minute
// (the token, the pipeline, one page of agents), one more per other token.
func TestRunCost(t *testing.T) {
	t.Parallel()
	f := fakebuildkite.New(nil)
	defer f.Close()
	documented(f)
	f.AddToken("bkua_second", "second")
	cfg := config(t, f, f.Token, f.Pipeline)
	cfg.Others = []*client.Client{config(t, f, "bkua_second", f.Pipeline).Client}
	if _, err := Run(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
	if n := f.CountRequests("", "/v2/"); n != 4 {
		t.Errorf("%d requests; want 4 (two tokens, the pipeline, the agents)", n)
	}
}
