package fakebuildkite

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/gpu-mode/kbgen/fleet/runfacts"
	"github.com/gpu-mode/kbgen/internal/contract"
	"github.com/gpu-mode/kbgen/payload"
)

// Webhook is where and how the fake notifies of finished jobs and builds,
// as a Buildkite webhook notification service does: job.finished for the
// eval job, then build.finished, each a POST of
// {"event": …, "build": {…}, "job": {…}, "pipeline": {…}, "sender": {…}}
// with X-Buildkite-Event and either X-Buildkite-Signature (Secret set) or
// X-Buildkite-Token (Token set).
type Webhook struct {
	URL    string
	Secret string
	Token  string
	// Duplicate sends every notification twice, as Buildkite's
	// at-least-once delivery may.
	Duplicate bool
	// Every is how often the fake looks for newly finished builds on the
	// real clock; default 20ms.
	Every time.Duration
}

type webhooks struct {
	cfg      Webhook
	notified map[int]bool
	sent     int
	failed   int
	stop     context.CancelFunc
	done     chan struct{}
}

// SetWebhook starts notifying cfg.URL of every build that finishes from
// now on (builds already finished are not announced). Close stops it.
func (s *Server) SetWebhook(cfg Webhook) {
	if cfg.Every <= 0 {
		cfg.Every = 20 * time.Millisecond
	}
	s.stopWebhooks()
	ctx, cancel := context.WithCancel(context.Background())
	h := &webhooks{cfg: cfg, notified: map[int]bool{}, stop: cancel, done: make(chan struct{})}
	now := s.now()
	s.mu.Lock()
	for n, b := range s.builds {
		if s.stateLocked(b, now).finished {
			h.notified[n] = true
		}
	}
	s.hook = h
	s.mu.Unlock()
	go s.deliver(ctx, h)
}

// WebhooksSent is how many webhook POSTs were answered 2xx, and how many
// were not (or could not be made).
func (s *Server) WebhooksSent() (ok, failed int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hook == nil {
		return 0, 0
	}
	return s.hook.sent, s.hook.failed
}

func (s *Server) stopWebhooks() {
	s.mu.Lock()
	h := s.hook
	s.hook = nil
	s.mu.Unlock()
	if h != nil {
		h.stop()
		<-h.done
	}
}

func (s *Server) deliver(ctx context.Context, h *webhooks) {
	defer close(h.done)
	client := &http.Client{Timeout: 10 * time.Second}
	tick := time.NewTicker(h.cfg.Every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		for _, body := range s.newlyFinished(h) {
			for range 1 + boolInt(h.cfg.Duplicate) {
				ok := post(ctx, client, h.cfg, body.event, body.data)
				s.mu.Lock()
				if ok {
					h.sent++
				} else {
					h.failed++
				}
				s.mu.Unlock()
			}
		}
	}
}

type notification struct {
	event string
	data  []byte
}

// newlyFinished builds the notifications of builds that finished since
// the last look: the eval job's job.finished first, then build.finished.
func (s *Server) newlyFinished(h *webhooks) []notification {
	now := s.now()
	var fresh []*build
	s.mu.Lock()
	for n, b := range s.builds {
		if !h.notified[n] && s.stateLocked(b, now).finished {
			h.notified[n] = true
			fresh = append(fresh, b)
		}
	}
	s.mu.Unlock()
	var out []notification
	for _, b := range fresh {
		for _, ev := range []string{"job.finished", "build.finished"} {
			data, ok := s.WebhookBody(ev, b.number)
			if ok {
				out = append(out, notification{ev, data})
			}
		}
	}
	return out
}

// WebhookBody is the JSON Buildkite would POST for event ("build.finished",
// "job.finished", "build.running", …) about build number now; false when
// there is no such build (or, for a job event, no eval job yet). Tests use it
// to replay, reorder or forge notifications.
func (s *Server) WebhookBody(event string, number int) ([]byte, bool) {
	s.mu.Lock()
	b := s.builds[number]
	s.mu.Unlock()
	if b == nil {
		return nil, false
	}
	bj := s.buildJSON(b, s.now())
	jobs, _ := bj["jobs"].([]any)
	delete(bj, "jobs")
	msg := map[string]any{
		"event": event, "build": bj,
		"pipeline": map[string]any{"slug": s.Pipeline, "name": s.Pipeline},
		"sender":   map[string]any{"name": "Buildkite stand-in"},
	}
	if len(event) > 4 && event[:4] == "job." {
		if len(jobs) < 2 {
			return nil, false
		}
		msg["job"] = jobs[len(jobs)-1]
	}
	data, err := json.Marshal(msg)
	return data, err == nil
}

// SignWebhook is the X-Buildkite-Signature header value for body sent at
// t: "timestamp=T,signature=hex(HMAC-SHA256(secret, T + "." + body))".
func SignWebhook(secret string, t time.Time, body []byte) string {
	ts := fmt.Sprint(t.Unix())
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	return "timestamp=" + ts + ",signature=" + hex.EncodeToString(mac.Sum(nil))
}

func post(ctx context.Context, c *http.Client, cfg Webhook, event string, body []byte) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return false
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Buildkite-Event", event)
	if cfg.Secret != "" {
		req.Header.Set("X-Buildkite-Signature", SignWebhook(cfg.Secret, time.Now(), body))
	}
	if cfg.Token != "" {
		req.Header.Set("X-Buildkite-Token", cfg.Token)
	}
	resp, err := c.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode/100 == 2
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// resultMetaOnce caches each encoded result by its job and content: a
// build's address is no key, since a closed server's builds are freed and
// a later test's build can get the same address (two canary tests read
// each other's scores that way).
var resultMetaOnce sync.Map // job and the result's hash → encoded result, computed once

// metaData is the build's meta-data now: what it was created with, plus
// the result once an eval job uploaded it when the script says the runner
// sets it, stamped with that job's id. Meta-data is per build and the
// last write wins (build_meta_data.md): a first attempt's value stays
// when its retry sets none.
func (s *Server) metaData(b *build, snap snapshot) map[string]string {
	return withFacts(s.resultMetaData(b, snap), b, snap)
}

// withFacts adds the script's run facts (Script.Facts) for each eval
// attempt that ran to its end, under its attempt's key, stamped with its
// job and with its exit status, as the hook's publish sets them.
func withFacts(md map[string]string, b *build, snap snapshot) map[string]string {
	if b.script.Facts == nil {
		return md
	}
	md = maps.Clone(md)
	if md == nil {
		md = map[string]string{}
	}
	attempt := 1
	if j := snap.first; j != nil {
		setFacts(md, *b.script.Facts, attempt, firstJobID(b), j.exit)
		attempt++
	}
	if j := snap.eval; j != nil && !j.started.IsZero() && !j.finished.IsZero() && j.state != "canceled" {
		setFacts(md, *b.script.Facts, attempt, jobID(b, true), j.exit)
	}
	return md
}

func setFacts(md map[string]string, f runfacts.Facts, attempt int, job string, exit *int) {
	f.Attempt, f.Exit = attempt, exit
	if v, err := runfacts.Encode(job, f); err == nil {
		md[runfacts.Key(attempt)] = v
	}
}

func (s *Server) resultMetaData(b *build, snap snapshot) map[string]string {
	if !b.script.ResultInMetaData {
		return b.body.MetaData
	}
	job, res := "", []byte(nil)
	if snap.first != nil && b.script.FirstResult != nil {
		job, res = firstJobID(b), b.script.FirstResult
	}
	if snap.eval != nil && !snap.eval.started.IsZero() && !snap.eval.finished.IsZero() && snap.eval.state != "canceled" && (snap.first == nil || !b.script.RetryLost) {
		for _, a := range artifactsOf(b) {
			if a.path == contract.ResultFile {
				job, res = jobID(b, true), a.content
			}
		}
	}
	if res == nil {
		return b.body.MetaData
	}
	key := fmt.Sprintf("%s/%x", job, sha256.Sum256(res))
	v, ok := resultMetaOnce.Load(key)
	if !ok {
		enc, fits := payload.EncodeResultMetaData(job, res)
		if !fits {
			enc = ""
		}
		v, _ = resultMetaOnce.LoadOrStore(key, enc)
	}
	if v.(string) == "" {
		return b.body.MetaData
	}
	md := maps.Clone(b.body.MetaData)
	if md == nil {
		md = map[string]string{}
	}
	md[payload.ResultMetaDataKey] = v.(string)
	return md
}
