package alert

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/gpu-mode/kbgen/internal/version"
)

// DeliveryHeader carries the delivery's id on every request.
const DeliveryHeader = "X-Kbgen-Delivery"

// sendError is a receiver's refusal or failure; permanent ones (a 4xx
// other than 408 and 429: the URL or payload is wrong) are not retried.
type sendError struct {
	msg        string
	permanent  bool
	retryAfter time.Duration
}

func (e *sendError) Error() string { return e.msg }

// send posts d to r; nil on a 2xx.
func send(ctx context.Context, c *http.Client, r Receiver, d Delivery) error {
	body, err := bodyFor(r, d)
	if err != nil {
		return &sendError{msg: err.Error(), permanent: true}
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.URL, bytes.NewReader(body))
	if err != nil {
		return &sendError{msg: "bad receiver URL", permanent: true}
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "kbgen/"+version.String())
	req.Header.Set(DeliveryHeader, d.ID)
	resp, err := c.Do(req)
	if err != nil {
		return &sendError{msg: withoutURL(err)}
	}
	defer resp.Body.Close()
	// Slack answers a refusal with a short word (invalid_payload,
	// no_service…): worth a log line, bounded.
	said, _ := io.ReadAll(io.LimitReader(resp.Body, 256))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	e := &sendError{msg: fmt.Sprintf("HTTP %d %q", resp.StatusCode, said)}
	switch {
	case resp.StatusCode == http.StatusTooManyRequests:
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
			e.retryAfter = time.Duration(s) * time.Second
		}
	case resp.StatusCode/100 == 4 && resp.StatusCode != http.StatusRequestTimeout:
		e.permanent = true
	}
	return e
}

func bodyFor(r Receiver, d Delivery) ([]byte, error) {
	if r.Kind == KindSlack {
		return SlackBody(d.Transition)
	}
	return WebhookBody(d)
}

// withoutURL is err without the URL net/http puts in it: a Slack
// webhook's URL is its credential.
func withoutURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Op + ": " + ue.Err.Error()
	}
	return err.Error()
}
