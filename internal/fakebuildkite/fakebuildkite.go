// Package fakebuildkite is a local HTTP server that speaks the part of the
// Buildkite REST API kbgen uses (builds, jobs, artifacts, agents), with
// build states that move over (virtual) time, a second storage server that
// rejects any request carrying credentials, and injectable faults. With
// NewLive it also serves the Agent API v3, and builds run for real on
// `buildkite-agent start` processes (live.go, agentapi.go). It is for tests,
// benchmarks and `kbgen doctor --e2e`.
package fakebuildkite

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/contract"
)

// Script is how one build moves, as offsets from its creation.
type Script struct {
	BootStart time.Duration // build running, bootstrap job running
	Uploaded  time.Duration // bootstrap passed; eval job appears, scheduled
	EvalStart time.Duration // eval job running
	Finish    time.Duration // eval job ends, and with it the build

	EvalExit        int  // eval's exit status: 0 passes the build
	BootstrapFails  bool // bootstrap exits 1 at Uploaded; no eval job
	EvalNeverStarts bool // eval stays scheduled, expires at Finish
	Never           bool // the eval job runs forever
	NoStepKey       bool // the eval job has no step_key (old pipelines)
	// CancelAt, when set, is when someone cancels the build in the UI.
	CancelAt time.Duration
	// Artifacts the eval job has uploaded by Finish: path → content.
	// Nil means one valid result.json (DefaultResult).
	Artifacts map[string][]byte
	// ResultInMetaData: the runner also set result.json as build
	// meta-data (payload.ResultMetaDataKey) when it uploaded it.
	ResultInMetaData bool
	// MetaDataOnly, with ResultInMetaData: the runner uploads no
	// result.json artifact when the result fits the meta-data, as
	// runner.Publish does (the artifact upload costs the agent's 1 s
	// uploader loop); the other artifacts are uploaded as listed.
	MetaDataOnly bool
	// RetryExit, when not 0, ends the eval job's first attempt halfway
	// between EvalStart and Finish with that exit status (75: the
	// machine's fault) after it uploaded FirstResult (artifact, and
	// meta-data with ResultInMetaData); the step's retry rule makes a new
	// job that starts at once and is the one Finish ends.
	RetryExit   int
	FirstResult []byte
	// RetryLost: the retry's agent is lost; the job ends at Finish with
	// exit -1 and uploads nothing.
	RetryLost bool
	// Facts, when set, are the eval job's run facts, set as meta-data
	// (runfacts.MetaDataKey) when it finishes, as the hook's publish does.
	Facts *runfacts.Facts
	// Agent is the agent Buildkite says ran each started eval job; ""
	// means the one Facts name (the host writes its own agent's facts),
	// else DefaultAgent.
	Agent string
}

// DefaultAgent is the agent of a started job whose script names none.
const DefaultAgent = "gpu-node-3-gpu0"

// agent is the agent name the REST answer gives a started job of s.
func (s Script) agent() string {
	switch {
	case s.Agent != "":
		return s.Agent
	case s.Facts != nil && s.Facts.Agent != "":
		return s.Facts.Agent
	}
	return DefaultAgent
}

// DefaultResult is the result.json of a build whose script names none.
const DefaultResult = `{"success": true, "error": "", "system": {"gpu": "NVIDIA H100 80GB HBM3", "device_count": 1, "cpu": "AMD EPYC 9654", "runtime": "CUDA", "platform": "Linux", "torch": "2.6.0", "hostname": "gpu-node-3"}, "runs": {"test": {"start": "2026-01-02T03:04:05.000000", "end": "2026-01-02T03:04:09.500000", "compilation": null, "run": {"success": true, "passed": true, "command": "python3 eval.py test test.txt", "stdout": "", "stderr": "", "exit_code": 0, "duration": 4.5, "result": {"check": "pass"}}, "profile": null}}}`

// QuickScript is a build that passes after 4 s.
var QuickScript = Script{BootStart: 300 * time.Millisecond, Uploaded: 1500 * time.Millisecond, EvalStart: 2100 * time.Millisecond, Finish: 4 * time.Second}

// Fault changes the next Times requests that match Method and contain
// Path. Exactly one effect applies: Reset drops the connection, Status
// answers with that code (and the rate-limit headers), Delay stalls before
// answering normally.
type Fault struct {
	Method         string
	Path           string
	Times          int
	Status         int
	RetryAfter     string
	RateLimitReset string
	// UserRateLimitReset and Scope make a 429 as the per-user limit sends
	// it (RateLimit-User-Reset, a body naming the scope).
	UserRateLimitReset string
	Scope              string
	Reset              bool
	Delay              time.Duration
}

// AgentSpec is a connected agent.
type AgentSpec struct {
	Name, Version, Queue string
	BusyWith             string // label of the running job; "" = idle
	Paused               bool
	// Tags are more agent tags ("key=value"), listed after queue= and
	// gpu-index= in its meta_data, as Buildkite lists an agent's tags.
	Tags []string
}

// Request is one request either server saw.
type Request struct {
	Server string // "api" or "storage"
	Method string
	Path   string // with the query
	Header http.Header
	Body   string
	At     time.Time // on the server's clock
}

// Server is the fake. Create with New; Close when done.
type Server struct {
	API     *httptest.Server
	Storage *httptest.Server
	// Agent serves the Agent API v3 of a live server (NewLive); nil
	// otherwise.
	Agent *httptest.Server

	Org, Pipeline, Token string

	mu     sync.Mutex
	now    func() time.Time
	script Script
	// scriptFor, when set, picks each created build's script from its
	// env (SetScriptFor).
	scriptFor func(env map[string]string) Script
	builds    map[int]*build
	next      int
	faults    []*Fault
	requests  []Request
	agents    []AgentSpec
	pauses    map[string]*pauseState // by agent name: agentpause.go
	limit     rateLimit
	tokens    map[string]string   // API token → its user (AddToken)
	scopes    map[string][]string // API token → its scopes, when not kbgen's (SetTokenScopes)
	settings  PipelineSettings
	hidden    map[int]bool // builds the list leaves out (HideFromList)
	hook      *webhooks
	live      *live // set by NewLive: builds run on real agents
}

type build struct {
	number     int
	created    time.Time
	canceledAt time.Time
	script     Script
	body       createBody
	live       *liveBuild // a live server's build
}

type createBody struct {
	Commit   string            `json:"commit"`
	Branch   string            `json:"branch"`
	Message  string            `json:"message"`
	Env      map[string]string `json:"env"`
	MetaData map[string]string `json:"meta_data"`
}

// DefaultUser owns Token.
const DefaultUser = "kbgen"

// New starts both servers. now is the clock build states follow (nil:
// time.Now); tests pass a virtual clock the client also sleeps on.
func New(now func() time.Time) *Server { return newServer(now, nil) }

// newServer is New with the REST API on apiLn (nil: a free port).
func newServer(now func() time.Time, apiLn net.Listener) *Server {
	if now == nil {
		now = time.Now
	}
	s := &Server{Org: "gpu-mode", Pipeline: "kernelbot", Token: "bkua_s3cr3t-t0ken-value", now: now, builds: map[int]*build{}, next: 1, script: QuickScript,
		tokens: map[string]string{}, scopes: map[string][]string{}, pauses: map[string]*pauseState{}, settings: NewPipelineSettings(), limit: rateLimit{rejected: map[string]int{}}}
	s.tokens[s.Token] = DefaultUser
	s.API = serveOn(apiLn, http.HandlerFunc(s.serveAPI))
	s.Storage = httptest.NewServer(http.HandlerFunc(s.serveStorage))
	return s
}

// serveOn serves h on ln, or on a free loopback port when ln is nil.
func serveOn(ln net.Listener, h http.Handler) *httptest.Server {
	if ln == nil {
		return httptest.NewServer(h)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	return srv
}

// Close stops both servers.
func (s *Server) Close() {
	s.stopWebhooks()
	s.closeLive()
	s.API.Close()
	s.Storage.Close()
}

// URL is the API base URL to hand the client.
func (s *Server) URL() string { return s.API.URL + "/" }

// SetScript sets the script of builds created from now on.
func (s *Server) SetScript(sc Script) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.script = sc
}

// AddFault queues a fault.
func (s *Server) AddFault(f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.Times == 0 {
		f.Times = 1
	}
	s.faults = append(s.faults, &f)
}

// SetAgents sets the connected agents.
func (s *Server) SetAgents(a []AgentSpec) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.agents = a
}

// Seed creates a build directly (not through the API), for queue tests.
func (s *Server) Seed(runID, queue string, sc Script, age time.Duration) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := &build{number: s.next, created: s.now().Add(-age), script: sc,
		body: createBody{Commit: "HEAD", Branch: "main", Message: "seeded", MetaData: map[string]string{contract.MetaDataRunID: runID, contract.MetaDataQueue: queue}, Env: map[string]string{contract.EnvQueue: queue}}}
	s.builds[b.number] = b
	s.next++
	return b.number
}

// Requests returns every request seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

// CountRequests counts API requests by method whose path contains part.
func (s *Server) CountRequests(method, part string) int {
	n := 0
	for _, r := range s.Requests() {
		if r.Server == "api" && (method == "" || r.Method == method) && strings.Contains(r.Path, part) {
			n++
		}
	}
	return n
}

// CreatedEnv returns the env a build was created with.
func (s *Server) CreatedEnv(number int) (env, meta map[string]string, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.builds[number]
	if b == nil {
		return nil, nil, ""
	}
	return b.body.Env, b.body.MetaData, b.body.Message
}

// CreatedRef is the branch and commit build number was created with.
func (s *Server) CreatedRef(number int) (branch, commit string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.builds[number]
	if b == nil {
		return "", ""
	}
	return b.body.Branch, b.body.Commit
}

// PassedAt is the time build number reaches its final state, per its
// script (zero for a build that never ends).
func (s *Server) PassedAt(number int) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.builds[number]
	if b == nil || b.script.Never {
		return time.Time{}
	}
	if b.script.BootstrapFails {
		return b.created.Add(b.script.Uploaded)
	}
	return b.created.Add(b.script.Finish)
}

func (s *Server) record(server string, r *http.Request) {
	var body []byte
	if r.Body != nil {
		body, _ = io.ReadAll(r.Body)
		r.Body = io.NopCloser(strings.NewReader(string(body)))
	}
	s.mu.Lock()
	s.requests = append(s.requests, Request{Server: server, Method: r.Method, Path: r.URL.RequestURI(), Header: r.Header.Clone(), Body: string(body), At: s.now()})
	s.mu.Unlock()
}

// fault returns the first live fault matching r, using one of its Times.
func (s *Server) fault(r *http.Request) *Fault {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range s.faults {
		if f.Times > 0 && (f.Method == "" || f.Method == r.Method) && strings.Contains(r.URL.RequestURI(), f.Path) {
			f.Times--
			c := *f
			return &c
		}
	}
	return nil
}

func (s *Server) serveAPI(w http.ResponseWriter, r *http.Request) {
	s.record("api", r)
	if s.limited(w, r) {
		return
	}
	if f := s.fault(r); f != nil {
		switch {
		case f.Reset:
			hj, ok := w.(http.Hijacker)
			if !ok {
				panic("fakebuildkite: cannot hijack")
			}
			conn, _, err := hj.Hijack()
			if err == nil {
				conn.Close()
			}
			return
		case f.Status != 0:
			if f.RetryAfter != "" {
				w.Header().Set("Retry-After", f.RetryAfter)
			}
			if f.RateLimitReset != "" {
				w.Header().Set("RateLimit-Reset", f.RateLimitReset)
			}
			if f.UserRateLimitReset != "" {
				w.Header().Set("RateLimit-User-Reset", f.UserRateLimitReset)
			}
			body := map[string]string{"message": http.StatusText(f.Status)}
			if f.Scope != "" {
				body["scope"] = f.Scope
			}
			writeJSON(w, f.Status, body)
			return
		case f.Delay > 0:
			select {
			case <-time.After(f.Delay):
			case <-r.Context().Done():
				return
			}
		}
	}
	s.mu.Lock()
	_, known := s.tokens[bearer(r)]
	s.mu.Unlock()
	if !known {
		writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Authentication required. Please supply a valid API Access Token."})
		return
	}
	if r.URL.Path == "/v2/access-token" {
		s.serveAccessToken(w, r)
		return
	}
	prefix := "/v2/organizations/" + s.Org + "/"
	rest, ok := strings.CutPrefix(r.URL.Path, prefix)
	if !ok {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "No organization found"})
		return
	}
	parts := strings.Split(rest, "/")
	if !s.permitted(w, r, scopeFor(r.Method, parts)) {
		return
	}
	switch {
	case len(parts) == 1 && parts[0] == "agents" && r.Method == http.MethodGet:
		s.listAgents(w)
	case len(parts) == 3 && parts[0] == "agents" && (parts[2] == "pause" || parts[2] == "resume") && r.Method == http.MethodPut:
		s.serveAgentPause(w, r, parts[1], parts[2])
	case len(parts) == 2 && parts[0] == "pipelines" && r.Method == http.MethodGet:
		s.servePipeline(w, parts[1])
	case len(parts) >= 3 && parts[0] == "pipelines" && parts[1] == s.Pipeline && parts[2] == "builds":
		s.serveBuilds(w, r, parts[3:])
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
	}
}

func (s *Server) serveBuilds(w http.ResponseWriter, r *http.Request, parts []string) {
	if len(parts) == 0 {
		switch r.Method {
		case http.MethodPost:
			s.create(w, r)
		case http.MethodGet:
			s.list(w, r)
		default:
			writeJSON(w, http.StatusMethodNotAllowed, map[string]string{"message": "method not allowed"})
		}
		return
	}
	n, err := strconv.Atoi(parts[0])
	s.mu.Lock()
	b := s.builds[n]
	s.mu.Unlock()
	if err != nil || b == nil {
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "No build found"})
		return
	}
	now := s.now()
	switch {
	case len(parts) == 1 && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, restBuild(s.buildJSON(b, now), r))
	case b.live != nil && len(parts) == 6 && parts[1] == "jobs" && parts[3] == "artifacts" && parts[5] == "download":
		http.Redirect(w, r, s.liveDownloadURL(parts[4]), http.StatusFound)
	case len(parts) == 2 && parts[1] == "cancel" && r.Method == http.MethodPut:
		// builds.md: "Cancels the build if its state is either
		// scheduled, running, or failing"; anything else is a 422.
		s.mu.Lock()
		st := s.stateLocked(b, now)
		cancelable := !st.finished && (st.build == "scheduled" || st.build == "running" || st.build == "failing")
		if cancelable && b.canceledAt.IsZero() {
			b.canceledAt = now
		}
		if cancelable && b.live != nil {
			s.cancelLiveLocked(b, time.Now())
		}
		s.mu.Unlock()
		if !cancelable {
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Build can't be canceled because it's " + st.build + "."})
			return
		}
		writeJSON(w, http.StatusOK, s.buildJSON(b, now))
	case len(parts) == 2 && parts[1] == "artifacts" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.artifactsJSON(b, now, ""))
	case len(parts) == 4 && parts[1] == "jobs" && parts[3] == "artifacts" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.artifactsJSON(b, now, parts[2]))
	case len(parts) == 6 && parts[1] == "jobs" && parts[3] == "artifacts" && parts[5] == "download":
		// The real API redirects to a signed, short-lived S3 URL.
		http.Redirect(w, r, fmt.Sprintf("%s/files/%d/%s?X-Amz-Signature=fake%d", s.Storage.URL, b.number, parts[4], b.number), http.StatusFound)
	default:
		writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
	}
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var body createBody
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
		return
	}
	if body.Commit == "" || body.Branch == "" {
		writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Validation Failed: commit and branch are required"})
		return
	}
	s.mu.Lock()
	b := &build{number: s.next, created: s.now(), script: s.script, body: body}
	if s.scriptFor != nil {
		b.script = s.scriptFor(body.Env)
	}
	if s.live != nil {
		if err := s.startLiveLocked(b); err != nil {
			s.mu.Unlock()
			writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": err.Error()})
			return
		}
	}
	s.builds[b.number] = b
	s.next++
	s.mu.Unlock()
	writeJSON(w, http.StatusCreated, s.buildJSON(b, s.now()))
}

func (s *Server) listAgents(w http.ResponseWriter) {
	if s.live != nil {
		writeJSON(w, http.StatusOK, s.liveAgentsJSON())
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := []any{}
	for i, a := range s.agents {
		paused, p := s.agentPausedLocked(i)
		ag := map[string]any{
			"id": agentID(i), "name": a.Name, "connection_state": "connected",
			"hostname": "node", "version": a.Version, "meta_data": append([]string{"queue=" + a.Queue, "gpu-index=" + strconv.Itoa(i)}, a.Tags...),
			"paused": paused,
		}
		if p != nil {
			ag["paused_note"] = p.note
			ag["paused_timeout_in_minutes"] = int(p.until.Sub(s.now()).Round(time.Minute).Minutes())
		}
		if a.BusyWith != "" {
			ag["job"] = map[string]any{"id": "j", "type": "script", "name": a.BusyWith, "state": "running"} // agents.md: the job's "name"
		}
		out = append(out, ag)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) serveStorage(w http.ResponseWriter, r *http.Request) {
	s.record("storage", r)
	if r.Header.Get("Authorization") != "" {
		http.Error(w, "<Error><Code>InvalidArgument</Code><Message>Only one auth mechanism allowed</Message></Error>", http.StatusBadRequest)
		return
	}
	if s.live != nil && s.serveLiveStorage(w, r) {
		return
	}
	var n int
	var id string
	if _, err := fmt.Sscanf(r.URL.Path, "/files/%d/%s", &n, &id); err != nil {
		http.NotFound(w, r)
		return
	}
	s.mu.Lock()
	b := s.builds[n]
	s.mu.Unlock()
	if b == nil {
		http.NotFound(w, r)
		return
	}
	if id == firstArtifactID(b) && b.script.FirstResult != nil {
		_, _ = w.Write(b.script.FirstResult)
		return
	}
	for i, a := range artifactsOf(b) {
		if artifactID(b, i) == id {
			w.Header().Set("Content-Type", "application/octet-stream")
			_, _ = w.Write(a.content)
			return
		}
	}
	http.NotFound(w, r)
}

// restBuild shapes a build's JSON as the REST API answers r
// (pages/apis/rest_api/builds.md): without include_retried_jobs=true only
// the most recent job of each step is listed; exclude_jobs=true drops the
// jobs, exclude_pipeline=true the expanded pipeline (the stand-in has none
// to drop). There is no parameter to leave out env.
func restBuild(bj map[string]any, r *http.Request) map[string]any {
	q := r.URL.Query()
	if q.Get("exclude_jobs") == "true" {
		delete(bj, "jobs")
		return bj
	}
	if jobs, ok := bj["jobs"].([]any); ok && q.Get("include_retried_jobs") != "true" {
		kept := []any{}
		for _, j := range jobs {
			if m, ok := j.(map[string]any); ok && m["retried"] == true {
				continue
			}
			kept = append(kept, j)
		}
		bj["jobs"] = kept
	}
	return bj
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
