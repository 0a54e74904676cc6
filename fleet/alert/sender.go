package alert

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// DefaultInterval is the least time between two messages to one channel:
// Slack's incoming webhooks take about one a second.
const DefaultInterval = time.Second

// Sender delivers the ledger's pending messages, oldest first, at most
// one per Interval per channel; a channel that fails is tried again after
// a growing wait, its later messages held behind (order is kept).
type Sender struct {
	Engine   *Engine
	Client   *http.Client
	Interval time.Duration
	// Log is told each failed delivery; nil: silent.
	Log func(format string, args ...any)

	next  map[string]time.Time // per channel: the earliest next send
	fails map[string]int
}

// Run delivers until ctx is done.
func (s *Sender) Run(ctx context.Context) {
	if s.Interval <= 0 {
		s.Interval = DefaultInterval
	}
	if s.Client == nil {
		s.Client = &http.Client{Timeout: 10 * time.Second}
	}
	s.next, s.fails = map[string]time.Time{}, map[string]int{}
	t := time.NewTicker(s.Interval / 5)
	defer t.Stop()
	for {
		s.round(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-s.Engine.wake:
		}
	}
}

// round sends, for each channel that may send now, its oldest pending
// message.
func (s *Sender) round(ctx context.Context) {
	pending, err := s.Engine.ledger.Pending()
	if err != nil {
		s.logf("alerts: reading the ledger: %v", err)
		return
	}
	now := time.Now()
	tried := map[string]bool{}
	for _, d := range pending {
		if tried[d.Channel] || now.Before(s.next[d.Channel]) {
			tried[d.Channel] = true
			continue
		}
		tried[d.Channel] = true
		ch, ok := s.channel(d.Channel)
		if !ok {
			_ = s.Engine.ledger.Delivered(d.Seq) // its channel is gone from the config
			continue
		}
		if err := s.send(ctx, ch, d.Message); err != nil {
			s.fails[ch.Name]++
			s.next[ch.Name] = now.Add(min(time.Duration(1<<min(s.fails[ch.Name], 6))*s.Interval, 5*time.Minute))
			s.logf("alerts: %s to %s: %v (trying again)", d.Message.Key, ch.Name, err)
			continue
		}
		s.fails[ch.Name] = 0
		s.next[ch.Name] = now.Add(s.Interval)
		if err := s.Engine.ledger.Delivered(d.Seq); err != nil {
			s.logf("alerts: marking %s delivered: %v", d.Message.Key, err)
		}
	}
}

func (s *Sender) channel(name string) (Channel, bool) {
	for _, c := range s.Engine.cfg.Channels {
		if c.Name == name {
			return c, true
		}
	}
	return Channel{}, false
}

func (s *Sender) send(ctx context.Context, ch Channel, m Message) error {
	var body any = m
	if ch.Kind == Slack {
		body = map[string]string{"text": SlackText(m)}
	}
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, ch.URL, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", m.Key)
	resp, err := s.Client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered %s", resp.Status)
	}
	return nil
}

// SlackText is a message as one line of Slack mrkdwn.
func SlackText(m Message) string {
	icon := ":red_circle:"
	if m.Status == StatusResolved {
		icon = ":large_green_circle:"
	}
	q := ""
	if m.Queue != "" {
		q = " (" + m.Queue + ")"
	}
	return fmt.Sprintf("%s *[%s] %s*%s: %s · alarm `%s` since %s", icon, m.Status, slackEscape(m.Name), slackEscape(q), slackEscape(m.Summary), slackEscape(m.AlarmID), m.Since.UTC().Format(time.RFC3339))
}

// slackEscape escapes what Slack's mrkdwn reads as a link or a mention
// (&, <, >: docs.slack.dev, "Formatting text for app surfaces"): an agent
// name cannot become a link.
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace

func (s *Sender) logf(format string, args ...any) {
	if s.Log != nil {
		s.Log(format, args...)
	}
}
