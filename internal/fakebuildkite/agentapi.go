package fakebuildkite

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// The Agent API v3 as buildkite-agent v3.52.1 speaks it (its api/
// package is the contract): register, connect, heartbeat, ping,
// disconnect; jobs get/accept/start/finish (the job's `step`, signature
// included, for the agent to verify: agent/verify_job.go), log chunks,
// header times, pipeline upload, meta-data, annotations and artifacts.
// What the agent does not call (OIDC tokens, step export, job acquire) is
// left out.

// Intervals handed to agents at registration, in seconds: short, so tests
// see jobs and lost agents within a second or two. The job-status
// interval is how often a running job asks whether it was canceled or
// timed out (agent/job_runner.go jobCancellationChecker); v3.52.1 takes
// it in seconds, and 0 as 1 (v3.50.0/.1 multiplied it by a second twice,
// which is why kbgen refuses them: internal/bkagent.MinVersion).
const (
	pingInterval      = 1
	heartbeatInterval = 1
	jobStatusInterval = 1
)

func (s *Server) agentHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v3/register", s.register)
	mux.HandleFunc("POST /v3/connect", s.withAgent(func(w http.ResponseWriter, r *http.Request, a *liveAgent) {
		a.state = "connected"
		writeJSON(w, http.StatusOK, map[string]any{"id": a.id, "connection_state": "connected"})
	}))
	mux.HandleFunc("POST /v3/disconnect", s.withAgent(func(w http.ResponseWriter, r *http.Request, a *liveAgent) {
		a.state = "disconnected"
		writeJSON(w, http.StatusOK, map[string]any{"id": a.id, "connection_state": "disconnected"})
	}))
	mux.HandleFunc("POST /v3/heartbeat", s.withAgent(func(w http.ResponseWriter, r *http.Request, a *liveAgent) {
		var hb struct {
			SentAt string `json:"sent_at"`
		}
		_ = json.NewDecoder(r.Body).Decode(&hb)
		writeJSON(w, http.StatusOK, map[string]string{"sent_at": hb.SentAt, "received_at": time.Now().UTC().Format(time.RFC3339Nano)})
	}))
	mux.HandleFunc("GET /v3/ping", s.withAgent(s.ping))
	mux.HandleFunc("GET /v3/jobs/{id}", s.jobState)
	mux.HandleFunc("PUT /v3/jobs/{id}/accept", s.withAgent(s.accept))
	mux.HandleFunc("PUT /v3/jobs/{id}/start", s.withJob(s.start))
	mux.HandleFunc("PUT /v3/jobs/{id}/finish", s.withJob(s.finish))
	mux.HandleFunc("POST /v3/jobs/{id}/chunks", s.withJob(s.chunk))
	mux.HandleFunc("POST /v3/jobs/{id}/header_times", s.withJob(s.headerTimes))
	mux.HandleFunc("POST /v3/jobs/{id}/pipelines", s.withJob(s.upload))
	mux.HandleFunc("POST /v3/jobs/{id}/data/set", s.withJob(s.setMetaData))
	mux.HandleFunc("POST /v3/{scope}/{id}/data/{op}", s.withAgent(s.agentMetaData))
	mux.HandleFunc("POST /v3/jobs/{id}/annotations", s.withJob(s.annotate))
	mux.HandleFunc("DELETE /v3/jobs/{id}/annotations/{context}", s.withJob(func(w http.ResponseWriter, r *http.Request, j *liveJob) {
		delete(j.b.live.notes, r.PathValue("context"))
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc("POST /v3/jobs/{id}/artifacts", s.withJob(s.createArtifacts))
	mux.HandleFunc("PUT /v3/jobs/{id}/artifacts", s.withJob(s.updateArtifacts))
	mux.HandleFunc("GET /v3/builds/{id}/artifacts/search", s.withAgent(s.searchArtifacts))
	return mux
}

func agentError(w http.ResponseWriter, status int, format string, args ...any) {
	writeJSON(w, status, map[string]string{"message": fmt.Sprintf(format, args...)})
}

// withAgent authenticates an agent's access token and runs h under the
// server's lock.
func (s *Server) withAgent(h func(http.ResponseWriter, *http.Request, *liveAgent)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Token ")
		s.mu.Lock()
		defer s.mu.Unlock()
		a := s.live.agents[tok]
		if a == nil {
			agentError(w, http.StatusUnauthorized, "Invalid access token")
			return
		}
		now := time.Now()
		s.sweepLocked(now)
		// Only the agent process itself keeps it alive: heartbeats and
		// pings. A job's own calls (an orphaned bootstrap after the agent
		// died) do not.
		if r.URL.Path == "/v3/heartbeat" || r.URL.Path == "/v3/ping" || r.URL.Path == "/v3/connect" {
			if a.state == "lost" {
				agentError(w, http.StatusUnauthorized, "This agent was marked lost")
				return
			}
			a.lastSeen = now
		}
		h(w, r, a)
	}
}

// withJob also finds the job named in the path.
func (s *Server) withJob(h func(http.ResponseWriter, *http.Request, *liveJob)) http.HandlerFunc {
	return s.withAgent(func(w http.ResponseWriter, r *http.Request, a *liveAgent) {
		j := s.live.byID[r.PathValue("id")]
		if j == nil {
			agentError(w, http.StatusNotFound, "No job found")
			return
		}
		h(w, r, j)
	})
}

// jobState answers the agent's cancellation check with the job's state.
func (s *Server) jobState(w http.ResponseWriter, r *http.Request) {
	tok, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Token ")
	s.mu.Lock()
	a, j := s.live.agents[tok], s.live.byID[r.PathValue("id")]
	state := ""
	if j != nil {
		state = j.state
	}
	s.mu.Unlock()
	switch {
	case a == nil:
		agentError(w, http.StatusUnauthorized, "Invalid access token")
	case j == nil:
		agentError(w, http.StatusNotFound, "No job found")
	default:
		writeJSON(w, http.StatusOK, map[string]string{"state": state})
	}
}

func (s *Server) register(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name     string   `json:"name"`
		Hostname string   `json:"hostname"`
		Version  string   `json:"version"`
		Tags     []string `json:"meta_data"`
	}
	if r.Header.Get("Authorization") != "Token "+s.live.opts.AgentToken {
		agentError(w, http.StatusUnauthorized, "Invalid registration token")
		return
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		agentError(w, http.StatusBadRequest, "bad register request: %v", err)
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.live.nextAg++
	a := &liveAgent{id: newUUID(), name: req.Name, version: req.Version, token: fmt.Sprintf("bkaa_%s", newUUID()), queue: "default", tags: req.Tags, state: "registered", lastSeen: time.Now()}
	if a.name == "" {
		a.name = fmt.Sprintf("%s-%d", req.Hostname, s.live.nextAg)
	}
	for _, t := range req.Tags {
		if q, ok := strings.CutPrefix(t, "queue="); ok {
			a.queue = q
		}
	}
	s.live.agents[a.token] = a
	writeJSON(w, http.StatusOK, map[string]any{
		"id": a.id, "name": a.name, "access_token": a.token, "endpoint": "http://" + r.Host + "/v3",
		"ping_interval": pingInterval, "job_status_interval": jobStatusInterval, "heartbeat_interval": heartbeatInterval,
		"meta_data": a.tags,
	})
}

func (s *Server) jobJSON(j *liveJob, a *liveAgent, r *http.Request) map[string]any {
	return map[string]any{
		"id": j.id, "endpoint": "http://" + r.Host + "/v3", "state": j.state, "env": s.jobEnv(j, a), "step": j.spec.step,
		"chunks_max_size_bytes": 100000, "runnable_at": j.runnable.UTC().Format(time.RFC3339Nano),
	}
}

// ping hands an idle agent the next job of its queue.
func (s *Server) ping(w http.ResponseWriter, r *http.Request, a *liveAgent) {
	if a.state == "disconnected" {
		writeJSON(w, http.StatusOK, map[string]any{"action": "disconnect"})
		return
	}
	a.state = "connected"
	if a.job == nil {
		if j := s.nextJobLocked(a); j != nil {
			j.state, j.agent, j.agentName = "assigned", a, a.name
			a.job = j
		}
	}
	if a.job != nil && a.job.state == "assigned" {
		writeJSON(w, http.StatusOK, map[string]any{"action": "idle", "job": s.jobJSON(a.job, a, r)})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"action": "idle"})
}

func (s *Server) accept(w http.ResponseWriter, r *http.Request, a *liveAgent) {
	j := s.live.byID[r.PathValue("id")]
	if j == nil || j.agent != a || j.state != "assigned" {
		agentError(w, http.StatusUnprocessableEntity, "This job can't be accepted: it is not assigned to this agent")
		return
	}
	j.state, j.accepted = "accepted", time.Now()
	s.settleLocked(j.b, j.accepted)
	writeJSON(w, http.StatusOK, s.jobJSON(j, a, r))
}

func (s *Server) start(w http.ResponseWriter, r *http.Request, j *liveJob) {
	switch j.state {
	case "accepted":
		j.state, j.started = "running", time.Now()
		writeJSON(w, http.StatusOK, map[string]any{"id": j.id, "state": j.state})
	case "canceling":
		// Canceled between accept and start: the agent learns it on its
		// first job-state poll.
		j.started = time.Now()
		writeJSON(w, http.StatusOK, map[string]any{"id": j.id, "state": j.state})
	default:
		agentError(w, http.StatusUnprocessableEntity, "This job can't be started: it is %s", j.state)
	}
}

func (s *Server) finish(w http.ResponseWriter, r *http.Request, j *liveJob) {
	var req struct {
		ExitStatus   string `json:"exit_status"`
		Signal       string `json:"signal"`
		SignalReason string `json:"signal_reason"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		agentError(w, http.StatusBadRequest, "bad finish request: %v", err)
		return
	}
	if j.state != "running" && j.state != "accepted" && j.state != "canceling" {
		agentError(w, http.StatusUnprocessableEntity, "This job can't be finished: it is %s", j.state)
		return
	}
	exit, err := strconv.Atoi(req.ExitStatus)
	if err != nil {
		exit = -1
	}
	s.finishJobLocked(j, exit, req.Signal, req.SignalReason, time.Now())
	writeJSON(w, http.StatusOK, map[string]any{"id": j.id, "state": j.state})
}

func (s *Server) chunk(w http.ResponseWriter, r *http.Request, j *liveJob) {
	var body io.Reader = r.Body
	if r.Header.Get("Content-Encoding") == "gzip" {
		zr, err := gzip.NewReader(r.Body)
		if err != nil {
			agentError(w, http.StatusBadRequest, "bad chunk: %v", err)
			return
		}
		body = zr
	}
	b, err := io.ReadAll(io.LimitReader(body, 16<<20))
	if err != nil {
		agentError(w, http.StatusBadRequest, "bad chunk: %v", err)
		return
	}
	j.log.Write(b)
	writeJSON(w, http.StatusCreated, map[string]any{})
}

func (s *Server) headerTimes(w http.ResponseWriter, r *http.Request, j *liveJob) {
	var req struct {
		Times map[string]string `json:"header_times"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		agentError(w, http.StatusBadRequest, "bad header times: %v", err)
		return
	}
	if j.headerTimes == nil {
		j.headerTimes = map[string]string{}
	}
	for k, v := range req.Times {
		j.headerTimes[k] = v
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// upload adds an uploaded pipeline's steps after the uploading job. The
// answer is 201, not 202, so the agent treats the upload as applied
// without polling its status.
func (s *Server) upload(w http.ResponseWriter, r *http.Request, j *liveJob) {
	var req struct {
		UUID     string          `json:"uuid"`
		Pipeline json.RawMessage `json:"pipeline"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		agentError(w, http.StatusBadRequest, "bad pipeline upload: %v", err)
		return
	}
	if j.state != "running" {
		agentError(w, http.StatusUnprocessableEntity, "Pipelines can only be uploaded by a running job (this one is %s)", j.state)
		return
	}
	if j.b.live.uploads[req.UUID] {
		writeJSON(w, http.StatusCreated, map[string]any{})
		return
	}
	src := []byte(req.Pipeline)
	if rw := s.live.opts.RewriteUpload; rw != nil {
		src = rw(src)
	}
	specs, err := parseSteps(src, nil)
	if err == nil {
		err = duplicateKey(j.b.live, specs)
	}
	if err != nil {
		agentError(w, http.StatusUnprocessableEntity, "%v", err)
		return
	}
	j.b.live.uploads[req.UUID] = true
	s.insertLocked(j.b, j, specs, time.Now())
	writeJSON(w, http.StatusCreated, map[string]any{})
}

// duplicateKey refuses an upload whose step keys are already in the build
// or repeated: Buildkite fails a retried upload "with a duplicate-key
// error" (buildkite/docs pages/pipelines/configure/dynamic_pipelines.md,
// "Retried steps producing duplicates").
func duplicateKey(lb *liveBuild, specs []stepSpec) error {
	seen := map[string]bool{}
	for _, j := range lb.order {
		seen[j.spec.key] = true
	}
	for _, sp := range specs {
		if sp.key == "" {
			continue
		}
		if seen[sp.key] {
			//lint:ignore ST1005 Buildkite's own message, word for word (the agent prints it).
			return fmt.Errorf("The key %q has already been used by another step in this build", sp.key)
		}
		seen[sp.key] = true
	}
	return nil
}

func (s *Server) setMetaData(w http.ResponseWriter, r *http.Request, j *liveJob) {
	var m struct{ Key, Value string }
	if err := json.NewDecoder(r.Body).Decode(&m); err != nil || m.Key == "" {
		agentError(w, http.StatusUnprocessableEntity, "meta-data needs a key")
		return
	}
	j.b.live.metaData[m.Key] = m.Value
	writeJSON(w, http.StatusOK, map[string]any{})
}

// agentMetaData answers get, exists and keys for a build (scope builds) or the
// build of a job (scope jobs).
func (s *Server) agentMetaData(w http.ResponseWriter, r *http.Request, _ *liveAgent) {
	var lb *liveBuild
	switch r.PathValue("scope") {
	case "jobs":
		if j := s.live.byID[r.PathValue("id")]; j != nil {
			lb = j.b.live
		}
	case "builds":
		for _, b := range s.builds {
			if b.live != nil && b.live.id == r.PathValue("id") {
				lb = b.live
			}
		}
	}
	if lb == nil {
		agentError(w, http.StatusNotFound, "Not found")
		return
	}
	var m struct{ Key string }
	_ = json.NewDecoder(r.Body).Decode(&m)
	v, ok := lb.metaData[m.Key]
	switch r.PathValue("op") {
	case "exists":
		writeJSON(w, http.StatusOK, map[string]bool{"exists": ok})
	case "get":
		if !ok {
			agentError(w, http.StatusNotFound, "No key \"%s\" found", m.Key)
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"key": m.Key, "value": v})
	case "keys":
		keys := []string{}
		for k := range lb.metaData {
			keys = append(keys, k)
		}
		writeJSON(w, http.StatusOK, keys)
	default:
		agentError(w, http.StatusNotFound, "Not found")
	}
}

func (s *Server) annotate(w http.ResponseWriter, r *http.Request, j *liveJob) {
	var a struct {
		Body, Context, Style string
		Append               bool
	}
	if err := json.NewDecoder(r.Body).Decode(&a); err != nil {
		agentError(w, http.StatusBadRequest, "bad annotation: %v", err)
		return
	}
	if a.Context == "" {
		a.Context = "default"
	}
	old := j.b.live.notes[a.Context]
	if a.Append {
		a.Body = old.Body + a.Body
	}
	if a.Style == "" {
		a.Style = old.Style
	}
	j.b.live.notes[a.Context] = Annotation{Context: a.Context, Style: a.Style, Body: a.Body}
	writeJSON(w, http.StatusCreated, map[string]string{"id": newUUID()})
}

// createArtifacts registers a batch and answers with form-upload
// instructions pointing at the storage server, as Buildkite's own
// (non-S3-bucket) artifact storage does.
func (s *Server) createArtifacts(w http.ResponseWriter, r *http.Request, j *liveJob) {
	var batch struct {
		ID        string `json:"id"`
		Artifacts []struct {
			Path     string `json:"path"`
			FileSize int64  `json:"file_size"`
		} `json:"artifacts"`
	}
	if err := json.NewDecoder(r.Body).Decode(&batch); err != nil {
		agentError(w, http.StatusBadRequest, "bad artifact batch: %v", err)
		return
	}
	ids := []string{}
	for _, a := range batch.Artifacts {
		art := &liveArtifact{id: newUUID(), jobID: j.id, path: a.Path, batch: batch.ID, size: a.FileSize, state: "new"}
		s.live.arts[art.id] = art
		ids = append(ids, art.id)
	}
	writeJSON(w, http.StatusCreated, map[string]any{
		"id": batch.ID, "artifact_ids": ids,
		"upload_instructions": map[string]any{
			"data":   map[string]string{"batch": batch.ID, "path": "${artifact:path}"},
			"action": map[string]string{"url": s.Storage.URL, "method": "POST", "path": "/uploads", "file_input": "file"},
		},
	})
}

func (s *Server) updateArtifacts(w http.ResponseWriter, r *http.Request, j *liveJob) {
	var req struct {
		Artifacts []struct{ ID, State string } `json:"artifacts"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		agentError(w, http.StatusBadRequest, "bad artifact update: %v", err)
		return
	}
	for _, u := range req.Artifacts {
		if a := s.live.arts[u.ID]; a != nil && a.jobID == j.id {
			a.state = u.State
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{})
}

// searchArtifacts serves `buildkite-agent artifact search|download`.
func (s *Server) searchArtifacts(w http.ResponseWriter, r *http.Request, _ *liveAgent) {
	query := r.URL.Query().Get("query")
	out := []any{}
	for _, a := range s.live.arts {
		j := s.live.byID[a.jobID]
		if j == nil || j.b.live.id != r.PathValue("id") || a.state != "finished" {
			continue
		}
		if query != "" && query != a.path && !strings.HasPrefix(a.path, strings.TrimSuffix(query, "*")) {
			continue
		}
		out = append(out, map[string]any{"id": a.id, "path": a.path, "file_size": a.size, "job_id": a.jobID,
			"url": s.Storage.URL + "/objects/" + a.id, "state": a.state, "sha1sum": "", "created_at": j.created.UTC()})
	}
	writeJSON(w, http.StatusOK, out)
}

// serveLiveStorage takes form uploads (POST /uploads) and serves
// artifact content (GET /objects/ID); it reports whether it handled r.
func (s *Server) serveLiveStorage(w http.ResponseWriter, r *http.Request) bool {
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/uploads":
		if err := r.ParseMultipartForm(64 << 20); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return true
		}
		f, _, err := r.FormFile("file")
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return true
		}
		defer f.Close()
		content, err := io.ReadAll(f)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return true
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, a := range s.live.arts {
			if a.batch == r.FormValue("batch") && a.path == r.FormValue("path") {
				a.content, a.size = content, int64(len(content))
				w.WriteHeader(http.StatusCreated)
				return true
			}
		}
		http.Error(w, "no such artifact in the batch", http.StatusNotFound)
		return true
	case r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/objects/"):
		s.mu.Lock()
		a := s.live.arts[strings.TrimPrefix(r.URL.Path, "/objects/")]
		s.mu.Unlock()
		if a == nil || a.state != "finished" {
			http.NotFound(w, r)
			return true
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		_, _ = w.Write(a.content)
		return true
	}
	return false
}
