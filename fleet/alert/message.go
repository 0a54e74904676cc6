package alert

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Text is a transition in one line: its status, summary, labels, since
// when, and its alarm id (the same in the firing and the resolved line).
func Text(t Transition) string {
	a := t.Alarm
	var labels []string
	for _, k := range slices.Sorted(maps.Keys(a.Labels)) {
		labels = append(labels, k+"="+a.Labels[k])
	}
	when := "since " + a.Since.UTC().Format(time.RFC3339)
	if t.Status == Resolved {
		when = fmt.Sprintf("held %s", t.At.Sub(a.Since).Round(time.Second))
	}
	return fmt.Sprintf("%s %s: %s (%s; %s) [alarm %s]", strings.ToUpper(t.Status), a.Condition, a.Summary, strings.Join(labels, " "), when, a.ID)
}

// slackEscape escapes the three characters Slack's mrkdwn reads as
// control sequences, so that an agent or image name cannot make a link
// or a mention (https://api.slack.com/reference/surfaces/formatting#escaping).
var slackEscape = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// SlackBody is t as a Slack incoming webhook's message: a JSON object
// whose text field is the message (https://api.slack.com/messaging/webhooks).
func SlackBody(t Transition) ([]byte, error) {
	return json.Marshal(struct {
		Text string `json:"text"`
	}{slackEscape.Replace(Text(t))})
}

// Payload is what a generic JSON webhook receives.
type Payload struct {
	// ID is the delivery's id: a receiver that sees it twice (kbgen was
	// killed between the answer and the ledger's write) drops the repeat.
	ID     string    `json:"id"`
	Status string    `json:"status"`
	At     time.Time `json:"at"`
	Alarm  Alarm     `json:"alarm"`
	Text   string    `json:"text"`
}

// WebhookBody is d as a generic webhook's JSON body.
func WebhookBody(d Delivery) ([]byte, error) {
	t := d.Transition
	return json.Marshal(Payload{ID: d.ID, Status: t.Status, At: t.At, Alarm: t.Alarm, Text: Text(t)})
}
