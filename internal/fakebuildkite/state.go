package fakebuildkite

import (
	"fmt"
	"sort"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// jobState is one job at one instant.
type jobState struct {
	key, label, state string
	exit              *int
	started, finished time.Time
	runnable          time.Time // ready for an agent (runnable_at)
	retried           bool
}

// snapshot is a build at one instant, computed from its script.
type snapshot struct {
	build    string
	finished bool
	started  time.Time
	ended    time.Time
	boot     jobState
	eval     *jobState
	first    *jobState // the eval step's first attempt, once retried
}

func ip(n int) *int { return &n }

// stateLocked computes where the build's script has taken it by now.
func (s *Server) stateLocked(b *build, now time.Time) snapshot {
	if b.live != nil {
		return s.liveSnapshotLocked(b)
	}
	sc := b.script
	at := func(d time.Duration) time.Time { return b.created.Add(d) }
	reached := func(d time.Duration) bool { return !now.Before(at(d)) }
	cancelAt := b.canceledAt
	if sc.CancelAt > 0 && reached(sc.CancelAt) && (cancelAt.IsZero() || at(sc.CancelAt).Before(cancelAt)) {
		cancelAt = at(sc.CancelAt)
	}
	canceled := !cancelAt.IsZero()
	if canceled {
		now = cancelAt
		reached = func(d time.Duration) bool { return !cancelAt.Before(at(d)) }
	}
	snap := snapshot{build: "scheduled", boot: jobState{key: contract.BootstrapStepKey, label: ":pipeline: bootstrap", state: "scheduled"}}
	if reached(sc.BootStart) {
		snap.build, snap.started = "running", at(sc.BootStart)
		snap.boot.state, snap.boot.started = "running", at(sc.BootStart)
	}
	if reached(sc.Uploaded) {
		snap.boot.finished = at(sc.Uploaded)
		if sc.BootstrapFails {
			snap.boot.state, snap.boot.exit = "failed", ip(1)
			snap.build, snap.finished, snap.ended = "failed", true, at(sc.Uploaded)
			return snap
		}
		snap.boot.state, snap.boot.exit = "passed", ip(0)
		snap.eval = &jobState{key: contract.EvalStepKey, label: ":nvidia: eval h100 · test", state: "scheduled", runnable: at(sc.Uploaded)}
		if sc.NoStepKey {
			snap.eval.key = ""
		}
	}
	if snap.eval != nil && !sc.EvalNeverStarts && reached(sc.EvalStart) {
		snap.eval.state, snap.eval.started = "running", at(sc.EvalStart)
	}
	if mid := (sc.EvalStart + sc.Finish) / 2; snap.eval != nil && sc.RetryExit != 0 && reached(mid) {
		// The first attempt ended and was retried: the retry is the
		// step's job from now on (started at once on another agent).
		first := *snap.eval
		first.state, first.exit, first.finished, first.retried = "failed", ip(sc.RetryExit), at(mid), true
		snap.first = &first
		snap.eval.started, snap.eval.runnable = at(mid), at(mid)
	}
	if snap.eval != nil && !sc.Never && reached(sc.Finish) {
		snap.finished, snap.ended = true, at(sc.Finish)
		snap.eval.finished = at(sc.Finish)
		switch {
		case sc.EvalNeverStarts:
			snap.eval.state = "expired"
			snap.build = "failed"
		case snap.first != nil && sc.RetryLost:
			// A lost agent's job: exit -1, nothing uploaded (live.go's
			// sweepLocked ends it the same way).
			snap.eval.state, snap.eval.exit = "failed", ip(-1)
			snap.build = "failed"
		case sc.EvalExit == 0:
			snap.eval.state, snap.eval.exit = "passed", ip(0)
			snap.build = "passed"
		default:
			snap.eval.state, snap.eval.exit = "failed", ip(sc.EvalExit)
			snap.build = "failed"
		}
		return snap
	}
	if canceled {
		snap.build, snap.finished, snap.ended = "canceled", true, now
		for _, j := range []*jobState{&snap.boot, snap.eval} {
			if j != nil && (j.state == "running" || j.state == "scheduled") {
				j.state, j.finished = "canceled", now
			}
		}
	}
	return snap
}

func tsp(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func (s *Server) buildJSON(b *build, now time.Time) map[string]any {
	if b.live != nil {
		return s.liveBuildJSON(b)
	}
	s.mu.Lock()
	snap := s.stateLocked(b, now)
	s.mu.Unlock()
	base := fmt.Sprintf("%s/v2/organizations/%s/pipelines/%s/builds/%d", s.API.URL, s.Org, s.Pipeline, b.number)
	jobs := []any{}
	for _, j := range []*jobState{&snap.boot, snap.first, snap.eval} {
		if j == nil {
			continue
		}
		id := jobID(b, j == snap.eval)
		if j == snap.first {
			id = firstJobID(b)
		}
		job := map[string]any{
			"id": id, "type": "script", "name": j.label, "state": j.state, // REST jobs have a name, no label (builds.md)
			"exit_status": j.exit, "created_at": tsp(b.created), "started_at": tsp(j.started), "finished_at": tsp(j.finished),
			"runnable_at": tsp(j.runnable), "artifacts_url": fmt.Sprintf("%s/jobs/%s/artifacts", base, id), "web_url": fmt.Sprintf("https://buildkite.com/%s/%s/builds/%d#%s", s.Org, s.Pipeline, b.number, id),
			"retried": j.retried,
		}
		if j.retried {
			job["retried_in_job_id"] = jobID(b, true)
		}
		if j.key != "" {
			job["step_key"] = j.key
		}
		if !j.started.IsZero() {
			job["agent"] = map[string]any{"name": b.script.agent()}
		}
		jobs = append(jobs, job)
	}
	env := map[string]any{}
	for k, v := range b.body.Env {
		env[k] = v
	}
	return map[string]any{
		"id": fmt.Sprintf("build-%d", b.number), "number": b.number, "state": snap.build, "blocked": false,
		"url": base, "web_url": fmt.Sprintf("https://buildkite.com/%s/%s/builds/%d", s.Org, s.Pipeline, b.number),
		"message": b.body.Message, "commit": b.body.Commit, "branch": b.body.Branch, "env": env, "meta_data": s.metaData(b, snap),
		"created_at": tsp(b.created), "scheduled_at": tsp(b.created), "started_at": tsp(snap.started), "finished_at": tsp(snap.ended),
		"jobs": jobs,
	}
}

// firstJobID is the eval step's first attempt, when a script retries it.
func firstJobID(b *build) string { return fmt.Sprintf("0190-eval1-%d", b.number) }

func jobID(b *build, eval bool) string {
	if eval {
		return fmt.Sprintf("0190-eval-%d", b.number)
	}
	return fmt.Sprintf("0190-boot-%d", b.number)
}

type artifact struct {
	path    string
	content []byte
}

// artifactsOf lists what the eval job uploads, in a stable order.
func artifactsOf(b *build) []artifact {
	m := b.script.Artifacts
	if m == nil {
		m = map[string][]byte{contract.ResultFile: []byte(DefaultResult)}
	}
	var out []artifact
	for p, c := range m {
		out = append(out, artifact{p, c})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

func artifactID(b *build, i int) string { return fmt.Sprintf("0190-art-%d-%d", b.number, i) }

func firstArtifactID(b *build) string { return fmt.Sprintf("0190-art1-%d", b.number) }

// artifactsJSON lists the build's artifacts (or one job's): the eval job's
// exist once it has ended after starting. The bootstrap uploads none.
func (s *Server) artifactsJSON(b *build, now time.Time, job string) []any {
	if b.live != nil {
		return s.liveArtifactsJSON(b, job)
	}
	s.mu.Lock()
	snap := s.stateLocked(b, now)
	s.mu.Unlock()
	out := []any{}
	add := func(jobID, id string, a artifact) {
		base := fmt.Sprintf("%s/v2/organizations/%s/pipelines/%s/builds/%d/jobs/%s/artifacts", s.API.URL, s.Org, s.Pipeline, b.number, jobID)
		out = append(out, map[string]any{
			"id": id, "job_id": jobID, "url": base + "/" + id, "download_url": base + "/" + id + "/download",
			"state": "finished", "path": a.path, "dirname": ".", "filename": a.path, "mime_type": "application/json",
			"file_size": len(a.content), "sha1sum": "0",
		})
	}
	if snap.first != nil && b.script.FirstResult != nil && (job == "" || job == firstJobID(b)) && !b.script.onMetaDataOnly(artifact{contract.ResultFile, b.script.FirstResult}) {
		add(firstJobID(b), firstArtifactID(b), artifact{contract.ResultFile, b.script.FirstResult})
	}
	evalID := jobID(b, true)
	if snap.eval == nil || snap.eval.started.IsZero() || snap.eval.finished.IsZero() || snap.eval.state == "canceled" || (snap.first != nil && b.script.RetryLost) {
		return out
	}
	if job != "" && job != evalID {
		return out
	}
	for i, a := range artifactsOf(b) {
		if !b.script.onMetaDataOnly(a) {
			add(evalID, artifactID(b, i), a)
		}
	}
	return out
}

// onMetaDataOnly reports whether the runner sent a (result.json) only as
// meta-data: MetaDataOnly, and the result fits (runner/publish.go).
func (sc Script) onMetaDataOnly(a artifact) bool {
	if !sc.ResultInMetaData || !sc.MetaDataOnly || a.path != contract.ResultFile {
		return false
	}
	_, fits := payload.EncodeResultMetaData("0190-eval", a.content)
	return fits
}
