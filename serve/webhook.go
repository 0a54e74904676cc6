package serve

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gpu-mode/kbgen/internal/contract"
)

// maxWebhookBytes bounds a webhook body; Buildkite's are a few KiB.
const maxWebhookBytes = 1 << 20

// webhookHint is what the service reads of a webhook: which build, and
// that something happened to it. Nothing in it is believed: the watcher
// asks the API.
type webhookHint struct {
	Event string `json:"event"`
	Build struct {
		Number   int               `json:"number"`
		MetaData map[string]string `json:"meta_data"`
	} `json:"build"`
}

// ErrWebhookAuth is a webhook without a valid token or signature.
var ErrWebhookAuth = errors.New("webhook: bad or missing X-Buildkite-Signature / X-Buildkite-Token")

// checkWebhook authenticates a webhook: an HMAC-SHA256 signature over
// "timestamp.body" no older than the replay window when a secret is set,
// else the shared token; both compared in constant time.
func (s *Service) checkWebhook(h http.Header, body []byte) error {
	if sig := h.Get("X-Buildkite-Signature"); sig != "" && s.cfg.WebhookSecret != "" {
		return verifySignature(s.cfg.WebhookSecret, sig, body, s.cfg.Now(), s.cfg.ReplayWindow)
	}
	if tok := h.Get("X-Buildkite-Token"); tok != "" && s.cfg.WebhookToken != "" {
		if subtle.ConstantTimeCompare([]byte(tok), []byte(s.cfg.WebhookToken)) == 1 {
			return nil
		}
	}
	return ErrWebhookAuth
}

// verifySignature checks "timestamp=T,signature=HEX" against the secret.
func verifySignature(secret, header string, body []byte, now time.Time, window time.Duration) error {
	var ts, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		switch k {
		case "timestamp":
			ts = v
		case "signature":
			sig = v
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return ErrWebhookAuth
	}
	if d := now.Sub(time.Unix(sec, 0)); d > window || d < -window {
		return ErrWebhookAuth // a replay, or a clock far off
	}
	want, err := hex.DecodeString(sig)
	if err != nil {
		return ErrWebhookAuth
	}
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	if !hmac.Equal(mac.Sum(nil), want) {
		return ErrWebhookAuth
	}
	return nil
}

// serveWebhook answers POST /v1/buildkite/webhook: 401 unless
// authenticated; otherwise 200 at once, and for a build of one of the
// service's runs the watcher polls now. An unknown build is ignored.
func (s *Service) serveWebhook(w http.ResponseWriter, req *http.Request) {
	if s.webhookSlots != nil {
		select {
		case s.webhookSlots <- struct{}{}:
			defer func() { <-s.webhookSlots }()
		default:
			writeError(w, http.StatusServiceUnavailable, "too many webhooks at once; Buildkite retries")
			return
		}
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, maxWebhookBytes+1))
	if err != nil || len(body) > maxWebhookBytes {
		writeError(w, http.StatusRequestEntityTooLarge, "webhook body too large or unreadable")
		return
	}
	if err := s.checkWebhook(req.Header, body); err != nil {
		writeError(w, http.StatusUnauthorized, err.Error())
		return
	}
	var hint webhookHint
	if err := json.Unmarshal(body, &hint); err != nil {
		writeError(w, http.StatusBadRequest, "webhook body is not JSON")
		return
	}
	if s.agentWebhook(hint.Event, body) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "accepted"})
		return
	}
	r := s.runs.byNumber(hint.Build.Number)
	if r == nil || (hint.Build.MetaData[contract.MetaDataRunID] != "" && hint.Build.MetaData[contract.MetaDataRunID] != r.ID) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ignored"})
		return
	}
	if !r.Done() {
		s.wake()
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "accepted"})
}
