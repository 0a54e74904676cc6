package fakebuildkite

import (
	"fmt"
	"sort"
	"time"
)

// The REST view of live builds: the same JSON shapes as scripted builds,
// computed from the jobs agents really ran.

// liveSnapshotLocked is a live build's state for list filters and cancel.
func (s *Server) liveSnapshotLocked(b *build) snapshot {
	lb := b.live
	return snapshot{build: lb.state, finished: terminal(lb.state), started: lb.started, ended: lb.finished}
}

func (s *Server) liveBuildJSON(b *build) map[string]any {
	s.mu.Lock()
	defer s.mu.Unlock()
	lb := b.live
	base := fmt.Sprintf("%s/v2/organizations/%s/pipelines/%s/builds/%d", s.API.URL, s.Org, s.Pipeline, b.number)
	jobs := []any{}
	for _, j := range lb.order {
		for ; j != nil; j = j.retriedBy {
			job := map[string]any{
				"id": j.id, "type": "script", "name": j.spec.label, "state": j.state, // REST jobs have a name, no label (builds.md)
				"exit_status": j.exit, "created_at": tsp(j.created), "scheduled_at": tsp(j.created), "runnable_at": tsp(j.runnable),
				"started_at": tsp(j.started), "finished_at": tsp(j.finished), "command": j.spec.command,
				"artifacts_url": fmt.Sprintf("%s/jobs/%s/artifacts", base, j.id),
				"web_url":       fmt.Sprintf("https://buildkite.com/%s/%s/builds/%d#%s", s.Org, s.Pipeline, b.number, j.id),
				"retried":       j.retried, "retries_count": j.attempt, "agent_query_rules": []string{"queue=" + j.spec.queue},
				"priority": map[string]int{"number": j.spec.priority},
			}
			if j.retriedBy != nil {
				job["retried_in_job_id"] = j.retriedBy.id
			}
			if j.spec.key != "" {
				job["step_key"] = j.spec.key
			}
			if j.agentName != "" {
				job["agent"] = map[string]any{"name": j.agentName}
			}
			jobs = append(jobs, job)
		}
	}
	env := map[string]any{}
	for k, v := range b.body.Env {
		env[k] = v
	}
	meta := map[string]string{}
	for k, v := range lb.metaData {
		meta[k] = v
	}
	return map[string]any{
		"id": lb.id, "number": b.number, "state": lb.state, "blocked": false,
		"url": base, "web_url": fmt.Sprintf("https://buildkite.com/%s/%s/builds/%d", s.Org, s.Pipeline, b.number),
		"message": b.body.Message, "commit": b.body.Commit, "branch": b.body.Branch, "env": env, "meta_data": meta,
		"created_at": tsp(b.created), "scheduled_at": tsp(b.created), "started_at": tsp(lb.started), "finished_at": tsp(lb.finished),
		"jobs": jobs,
	}
}

// liveArtifactsJSON lists a build's uploaded artifacts (or one job's).
func (s *Server) liveArtifactsJSON(b *build, jobID string) []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	var arts []*liveArtifact
	for _, a := range s.live.arts {
		j := s.live.byID[a.jobID]
		if j == nil || j.b != b || (jobID != "" && a.jobID != jobID) {
			continue
		}
		arts = append(arts, a)
	}
	sort.Slice(arts, func(i, k int) bool {
		ji, jk := s.live.byID[arts[i].jobID], s.live.byID[arts[k].jobID]
		if !ji.created.Equal(jk.created) {
			return ji.created.Before(jk.created)
		}
		return arts[i].path < arts[k].path
	})
	out := []any{}
	for _, a := range arts {
		base := fmt.Sprintf("%s/v2/organizations/%s/pipelines/%s/builds/%d/jobs/%s/artifacts", s.API.URL, s.Org, s.Pipeline, b.number, a.jobID)
		out = append(out, map[string]any{
			"id": a.id, "job_id": a.jobID, "url": base + "/" + a.id, "download_url": base + "/" + a.id + "/download",
			"state": a.state, "path": a.path, "dirname": ".", "filename": a.path, "mime_type": "application/octet-stream",
			"file_size": a.size, "sha1sum": "0",
		})
	}
	return out
}

// liveDownloadURL is the signed storage URL an artifact download
// redirects to.
func (s *Server) liveDownloadURL(id string) string {
	return fmt.Sprintf("%s/objects/%s?X-Amz-Expires=600&X-Amz-Signature=local%d", s.Storage.URL, id, time.Now().UnixNano())
}

func (s *Server) liveAgentsJSON() []any {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []any{}
	for _, a := range s.live.agents {
		state := a.state
		if state == "registered" {
			state = "connected"
		}
		if state != "connected" {
			continue // agents.md: the list holds connected and stopping agents only
		}
		ag := map[string]any{"id": a.id, "name": a.name, "connection_state": state, "hostname": "localhost",
			"version": a.version, "meta_data": a.tags, "paused": false}
		if j := a.job; j != nil {
			ag["job"] = map[string]any{"id": j.id, "type": "script", "name": j.spec.label, "state": j.state} // agents.md: the job's "name"
		}
		out = append(out, ag)
	}
	return out
}
