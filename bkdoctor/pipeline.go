package bkdoctor

import (
	"fmt"
	"strings"

	buildkite "github.com/buildkite/go-buildkite/v4"
)

// pipelineChecks are the pipeline's own: that it is there, its settings
// steps, the intermediate-build settings and what starts its builds.
func pipelineChecks(p *buildkite.Pipeline, err error, cfg Config) []Check {
	if err != nil {
		return []Check{apiFailure("pipeline", err, "the pipeline (read_pipelines)")}
	}
	found := Check{Name: "pipeline", Level: Pass, Detail: fmt.Sprintf("%s, repository %s, default branch %s", p.Slug, p.Repository, p.DefaultBranch)}
	if p.ArchivedAt != nil {
		found = Check{Name: "pipeline", Level: Fail, Detail: p.Slug + " is archived: Buildkite creates no builds on it",
			Fix: "Pipeline Settings → Archive → unarchive it"}
	}
	return []Check{found, stepsCheck(p, cfg), intermediateCheck(p), triggerCheck(p)}
}

// intermediateCheck: every kbgen build is on one branch, so with either
// setting on, concurrent submissions skip or cancel each other
// (buildkite/docs pages/pipelines/configure/skipping.md).
func intermediateCheck(p *buildkite.Pipeline) Check {
	const name = "intermediate builds"
	var on []string
	if p.SkipQueuedBranchBuilds {
		on = append(on, `"Skip intermediate builds" (skip_queued_branch_builds): a queued submission is skipped when a newer one is created`)
	}
	if p.CancelRunningBranchBuilds {
		on = append(on, `"Cancel intermediate builds" (cancel_running_branch_builds): a running submission is cancelled when a newer one is created`)
	}
	if len(on) == 0 {
		return Check{Name: name, Level: Pass, Detail: "neither skipped nor cancelled: concurrent submissions on one branch all run"}
	}
	return Check{Name: name, Level: Fail, Detail: strings.Join(on, "; "),
		Fix: "Pipeline Settings → Builds: turn off Skip intermediate builds and Cancel intermediate builds"}
}

// triggerCheck: builds come only from the REST API. A push or a pull
// request must not start a build on the control queue.
func triggerCheck(p *buildkite.Pipeline) Check {
	const name = "build triggers"
	fix := "Pipeline Settings → GitHub: set Trigger to None (REST provider.settings.trigger_mode: none) and turn off Build pull requests"
	switch s := p.Provider.Settings.(type) {
	case *buildkite.GitHubSettings:
		return githubTrigger(name, fix, s.TriggerMode, s.BuildPullRequests)
	case *buildkite.GitHubEnterpriseSettings:
		return githubTrigger(name, fix, s.TriggerMode, s.BuildPullRequests)
	case *buildkite.BitbucketSettings:
		if s.BuildBranches || s.BuildPullRequests {
			return Check{Name: name, Level: Fail, Detail: "pushes or pull requests to the Bitbucket repository start builds",
				Fix: "Pipeline Settings → Bitbucket: turn off Build branches and Build pull requests, and remove the repository's webhook"}
		}
	case *buildkite.GitLabSettings:
		return Check{Name: name, Level: Warn, Detail: "the REST API does not say whether GitLab's webhook starts builds",
			Fix: "remove the pipeline's webhook from the GitLab project: builds must come only from kbgen"}
	}
	return Check{Name: name, Level: Pass, Detail: fmt.Sprintf("provider %q starts no builds: they come only from the API", p.Provider.ID)}
}

func githubTrigger(name, fix, mode string, pullRequests bool) Check {
	if mode != "none" {
		return Check{Name: name, Level: Fail, Fix: fix,
			Detail: fmt.Sprintf("trigger_mode is %q: GitHub events start builds, each a bootstrap on the control queue", mode)}
	}
	if pullRequests {
		return Check{Name: name, Level: Warn, Fix: fix,
			Detail: "trigger_mode is none, but Build pull requests is still on: it would start builds if the trigger changed"}
	}
	return Check{Name: name, Level: Pass, Detail: "trigger_mode none, no pull-request builds: builds come only from the API"}
}
