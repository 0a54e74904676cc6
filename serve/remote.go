package serve

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/client"
	"github.com/gpu-mode/kbgen/payload"
)

// Remote is a client of a kbgen serve API (kbgen submit --server).
type Remote struct {
	base  string
	token string
	hc    *http.Client
	// OutageTolerance is how long the service may be unreachable (a
	// restart) before Run gives up; default 2 minutes.
	OutageTolerance time.Duration
}

// NewRemote returns a client of the service at url: http://HOST:PORT or
// unix:/path/to/socket.
func NewRemote(url, token string) (*Remote, error) {
	r := &Remote{token: token, OutageTolerance: 2 * time.Minute}
	switch {
	case strings.HasPrefix(url, "unix:"):
		path := strings.TrimPrefix(url, "unix:")
		r.base = "http://kbgen-serve"
		r.hc = &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", path)
		}}}
	case strings.HasPrefix(url, "http://") || strings.HasPrefix(url, "https://"):
		r.base = strings.TrimSuffix(url, "/")
		r.hc = &http.Client{}
	default:
		return nil, fmt.Errorf("server URL %q is neither http(s)://HOST:PORT nor unix:/PATH", url)
	}
	return r, nil
}

// RefusedError is a request the service answered with a 4xx: repeating it
// cannot help.
type RefusedError struct {
	Status int
	Msg    string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("kbgen serve refused the run (%d): %s", e.Status, e.Msg)
}

// Run submits req (or attaches to the run of that id), passes its progress
// events to onEvent, and returns its final status. A service restart is
// ridden out: the stream resumes where it stopped, and a service that lost
// a queued run gets it again (same id, so never two builds). When ctx ends
// (SIGINT) the run is canceled and its final status returned.
func (r *Remote) Run(ctx context.Context, req RunRequest, onEvent func(client.Event)) (*RunStatus, error) {
	if _, err := r.call(ctx, http.MethodPost, "/v1/runs", req); err != nil {
		return nil, err
	}
	from, downSince := 0, time.Time{}
	for {
		n, done, err := r.stream(ctx, req.RunID, from, onEvent)
		from += n
		if done {
			return r.call(ctx, http.MethodGet, "/v1/runs/"+req.RunID, nil)
		}
		if ctx.Err() != nil {
			return r.cancel(req.RunID)
		}
		var refused *RefusedError
		if errors.As(err, &refused) && refused.Status == http.StatusNotFound {
			// A restarted service that never created the build: submit
			// again; the run id makes it safe.
			if _, err := r.call(ctx, http.MethodPost, "/v1/runs", req); err != nil && !retryable(err) {
				return nil, err
			}
		} else if err != nil && !retryable(err) {
			return nil, err
		}
		if n > 0 || downSince.IsZero() {
			downSince = time.Now()
		}
		if time.Since(downSince) > r.OutageTolerance {
			return nil, fmt.Errorf("kbgen serve unreachable for %s: %v; the run goes on: `kbgen submit --server … --run-id %s` re-attaches", r.OutageTolerance, err, req.RunID)
		}
		select {
		case <-ctx.Done():
			return r.cancel(req.RunID)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func retryable(err error) bool {
	var refused *RefusedError
	return !errors.As(err, &refused) || refused.Status == http.StatusNotFound
}

// stream reads events from index from until done (true) or the stream
// breaks; n is how many lines it read.
func (r *Remote) stream(ctx context.Context, id string, from int, onEvent func(client.Event)) (n int, done bool, err error) {
	resp, err := r.do(ctx, http.MethodGet, fmt.Sprintf("/v1/runs/%s/events?from=%d", id, from), nil)
	if err != nil {
		return 0, false, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e client.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return n, false, fmt.Errorf("kbgen serve sent a bad event: %v", err)
		}
		if IsHeartbeat(e) {
			continue // not an event: it keeps the stream open through proxies
		}
		n++
		if e.Kind == "done" {
			return n, true, nil
		}
		e.Elapsed = time.Duration(e.Seconds * float64(time.Second))
		onEvent(e)
	}
	if err := sc.Err(); err != nil {
		return n, false, err
	}
	return n, false, io.ErrUnexpectedEOF
}

// Health asks the service for its health (GET /, no token): the answer,
// and an error when there is none or it says the service is not ok (a
// 503: Buildkite unreachable since the start, or another service of its
// name).
func (r *Remote) Health(ctx context.Context) (*Health, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+"/", nil)
	if err != nil {
		return nil, err
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kbgen serve: GET /: %v", describe(err))
	}
	defer resp.Body.Close()
	var h Health
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&h); err != nil {
		return nil, fmt.Errorf("kbgen serve: GET /: %s, not its health (%v)", resp.Status, err)
	}
	if resp.StatusCode != http.StatusOK || !h.OK {
		return &h, fmt.Errorf("kbgen serve is not healthy (%s): %s", resp.Status, cmp.Or(h.Conflict, h.Buildkite))
	}
	return &h, nil
}

// cancel asks the service to cancel the run and waits for its outcome.
func (r *Remote) cancel(id string) (*RunStatus, error) {
	ctx, done := context.WithTimeout(context.Background(), 30*time.Second)
	defer done()
	st, err := r.call(ctx, http.MethodDelete, "/v1/runs/"+id, nil)
	for err == nil && st.State != StateDone {
		select {
		case <-ctx.Done():
			return st, nil
		case <-time.After(200 * time.Millisecond):
		}
		st, err = r.call(ctx, http.MethodGet, "/v1/runs/"+id, nil)
	}
	return st, err
}

// call makes one API request and decodes the run status it answers.
func (r *Remote) call(ctx context.Context, method, path string, body any) (*RunStatus, error) {
	resp, err := r.do(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var st RunStatus
	if err := json.NewDecoder(io.LimitReader(resp.Body, 128<<20)).Decode(&st); err != nil {
		return nil, fmt.Errorf("kbgen serve: %s %s: bad answer: %v", method, path, err)
	}
	if st.State == StateDone && st.Result == nil && st.ResultGone != "" {
		// The service no longer holds the result: an infra outcome (exit
		// 4) that says where it still is.
		msg := fmt.Sprintf("kbgen serve: run %s: %s", st.RunID, strings.ReplaceAll(st.ResultGone, "BUILD", strconv.Itoa(st.Build)))
		st.Status, st.Result = StatusInfra, payload.Failed(payload.SystemInfo{}, errors.New(msg))
	}
	return &st, nil
}

func (r *Remote) do(ctx context.Context, method, path string, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return nil, err
	}
	if r.token != "" {
		req.Header.Set("Authorization", "Bearer "+r.token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("kbgen serve: %s %s: %v", method, path, describe(err))
	}
	if resp.StatusCode >= 400 {
		defer resp.Body.Close()
		var eb ErrorBody
		_ = json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&eb)
		if resp.StatusCode >= 500 {
			return nil, fmt.Errorf("kbgen serve: %s %s: %s: %s", method, path, resp.Status, eb.Error)
		}
		return nil, &RefusedError{Status: resp.StatusCode, Msg: eb.Error}
	}
	return resp, nil
}

func describe(err error) string {
	var ue interface{ Unwrap() error }
	if errors.As(err, &ue) {
		if inner := ue.Unwrap(); inner != nil {
			return inner.Error()
		}
	}
	return err.Error()
}
