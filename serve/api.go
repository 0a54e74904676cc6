package serve

import (
	"bufio"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/client"
)

// maxRunBytes bounds a POST /v1/runs body: the payload limit plus room.
const maxRunBytes = 2 << 20

// Handler is the service's HTTP API. token, when set, is required as
// "Authorization: Bearer TOKEN" on every /v1/runs and /v1/queues request (compared in
// constant time); the webhook has its own authentication and GET / (the
// health check) none.
func (s *Service) Handler(token string) http.Handler {
	mux := http.NewServeMux()
	auth := func(h http.HandlerFunc) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			if token != "" && !bearerOK(r.Header.Get("Authorization"), token) {
				w.Header().Set("WWW-Authenticate", `Bearer realm="kbgen"`)
				writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (KBGEN_SERVER_TOKEN)")
				return
			}
			h(w, r)
		}
	}
	mux.HandleFunc("GET /{$}", s.serveHealth)
	mux.HandleFunc("POST /v1/runs", auth(s.servePost))
	mux.HandleFunc("GET /v1/runs/{id}", auth(s.serveGet))
	mux.HandleFunc("GET /v1/runs/{id}/events", auth(s.serveEvents))
	mux.HandleFunc("DELETE /v1/runs/{id}", auth(s.serveDelete))
	mux.HandleFunc("GET /v1/queues", auth(s.serveQueues))
	mux.HandleFunc("GET /v1/queues/{queue}", auth(s.serveQueues))
	mux.HandleFunc("GET /v1/canaries", s.viewAuth(token, s.serveCanaries))
	mux.HandleFunc("POST /v1/runs/{id}/verify", auth(s.servePostVerify))
	mux.HandleFunc("GET /v1/runs/{id}/verify", auth(s.serveGetVerify))
	mux.HandleFunc("POST /v1/buildkite/webhook", s.countWebhook(s.serveWebhook))
	mux.Handle("GET /metrics", s.viewAuth(token, s.metrics.Handler().ServeHTTP))
	mux.HandleFunc("GET /v1/agents", s.viewAuth(token, s.serveAgents))
	s.mountDashboard(mux, token)
	mux.HandleFunc("POST /v1/agents/{name}/quarantine", auth(s.serveQuarantine))
	mux.HandleFunc("POST /v1/agents/{name}/resume", auth(s.serveResume))
	return mux
}

func bearerOK(header, token string) bool {
	got, ok := strings.CutPrefix(header, "Bearer ")
	return ok && subtle.ConstantTimeCompare([]byte(got), []byte(token)) == 1
}

// Health is the answer of GET /.
type Health struct {
	OK        bool   `json:"ok"`
	Runs      int    `json:"runs"`
	Open      int    `json:"open"`
	Budget    Stats  `json:"budget"`
	PollEvery string `json:"poll_every"`
	// Buildkite is "ok", or why the service has not reached it since its
	// start (then OK is false and the answer 503: runs are accepted and
	// queued, none is created yet).
	Buildkite string `json:"buildkite"`
	// Conflict, when set, says that another service of this one's name
	// creates builds on the pipeline (twin.go); then OK is false and the
	// answer 503.
	Conflict string `json:"conflict,omitempty"`
}

func (s *Service) serveHealth(w http.ResponseWriter, _ *http.Request) {
	total, open := s.runs.counts()
	h := Health{OK: true, Runs: total, Open: open, Budget: s.cfg.Budget.Stats(), PollEvery: s.cfg.PollEvery.Round(time.Millisecond).String(), Buildkite: "ok"}
	code := http.StatusOK
	if down := s.Down(); down != "" {
		h.OK, h.Buildkite, code = false, down, http.StatusServiceUnavailable
	}
	if c := s.Conflict(); c != "" {
		h.OK, h.Conflict, code = false, c, http.StatusServiceUnavailable
	}
	writeJSON(w, code, h)
}

func (s *Service) servePost(w http.ResponseWriter, r *http.Request) {
	var req RunRequest
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRunBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "body is not a run request: "+err.Error())
		return
	}
	run, fresh, err := s.Submit(req)
	var re *RequestError
	switch {
	case errors.As(err, &re) && re.Conflict:
		writeError(w, http.StatusConflict, err.Error())
		return
	case err != nil:
		writeError(w, http.StatusUnprocessableEntity, err.Error())
		return
	}
	code := http.StatusOK
	if fresh {
		code = http.StatusCreated
	}
	s.writeStatus(w, code, run)
}

func (s *Service) run(w http.ResponseWriter, r *http.Request) *Run {
	run := s.runs.get(r.PathValue("id"))
	if run == nil {
		writeError(w, http.StatusNotFound, "no run "+strconv.Quote(r.PathValue("id")))
	}
	return run
}

func (s *Service) serveGet(w http.ResponseWriter, r *http.Request) {
	if run := s.run(w, r); run != nil {
		run.touch(s.cfg.Now())
		s.writeStatus(w, http.StatusOK, run)
	}
}

func (s *Service) serveDelete(w http.ResponseWriter, r *http.Request) {
	run := s.run(w, r)
	if run == nil {
		return
	}
	s.Cancel(run, "canceled by the client")
	s.writeStatus(w, http.StatusOK, run)
}

// serveEvents streams the run's progress events as JSON lines (the events
// of kbgen submit --progress=json), from index ?from=N, until the "done"
// event, with a heartbeat line (heartbeat.go) whenever Config.Heartbeat
// passes without one. A client that goes away and does not come back
// within Config.OrphanGrace has its run canceled (orphan.go).
func (s *Service) serveEvents(w http.ResponseWriter, r *http.Request) {
	run := s.run(w, r)
	if run == nil {
		return
	}
	defer run.attach(s.cfg.Now)()
	from, _ := strconv.Atoi(r.URL.Query().Get("from"))
	// The stream lasts as long as the run: the server's ReadTimeout,
	// meant for request bodies, must not cut it.
	_ = http.NewResponseController(w).SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("Cache-Control", "no-store")
	// nginx buffers a proxied response unless told otherwise
	// (ngx_http_proxy_module, proxy_buffering): a progress event must
	// not wait in a proxy's buffer.
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	beat := time.NewTicker(s.cfg.Heartbeat)
	defer beat.Stop()
	out := newLineWriter(w)
	for {
		evs, done, changed := run.Events(from)
		if done && len(evs) == 0 {
			// A client that counted past the end (a heartbeat taken for an
			// event, a restarted service's shorter list) still gets the
			// done event: a stream always ends with it.
			evs = run.last()
		}
		from += len(evs)
		if out.events(evs) != nil || done {
			return
		}
		select {
		case <-r.Context().Done():
			return
		case <-changed:
			beat.Reset(s.cfg.Heartbeat)
		case <-beat.C:
			if out.line(HeartbeatLine) != nil {
				return
			}
		}
	}
}

// lineWriter writes an event stream's lines and flushes each batch to the
// client at once.
type lineWriter struct {
	bw      *bufio.Writer
	enc     *json.Encoder
	flusher http.Flusher
}

func newLineWriter(w http.ResponseWriter) *lineWriter {
	bw := bufio.NewWriter(w)
	f, _ := w.(http.Flusher)
	return &lineWriter{bw: bw, enc: json.NewEncoder(bw), flusher: f}
}

func (l *lineWriter) events(evs []client.Event) error {
	for _, e := range evs {
		_ = l.enc.Encode(e)
	}
	return l.flush()
}

func (l *lineWriter) line(b []byte) error {
	_, _ = l.bw.Write(b)
	return l.flush()
}

func (l *lineWriter) flush() error {
	if err := l.bw.Flush(); err != nil {
		return err
	}
	if l.flusher != nil {
		l.flusher.Flush()
	}
	return nil
}

// writeStatus answers with the run's RunStatus, its result copied from
// the keeper (memory or a spilled file) into the answer without being
// decoded, so a large result costs no memory per request.
func (s *Service) writeStatus(w http.ResponseWriter, code int, run *Run) {
	st := run.Status(s.cfg.Now())
	var result io.ReadCloser
	if k := run.kept(); st.State == StateDone && k != nil {
		var gone string
		if result, _, gone = s.keep.open(k); result != nil {
			defer result.Close()
		}
		st.ResultGone = gone
	}
	head, err := json.Marshal(st)
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	if result == nil {
		_, _ = w.Write(append(head, '\n'))
		return
	}
	_, _ = w.Write(head[:len(head)-1]) // without its closing brace
	_, _ = io.WriteString(w, `,"result":`)
	_, _ = io.Copy(w, result)
	_, _ = io.WriteString(w, "}\n")
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, ErrorBody{Error: msg})
}
