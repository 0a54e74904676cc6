package alert

import (
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"slices"
	"time"
)

// Channel kinds.
const (
	Slack   = "slack"   // Slack's incoming webhook: {"text": …}
	Webhook = "webhook" // a generic JSON webhook: the Message as JSON
)

// Channel is where messages go.
type Channel struct {
	Name string `json:"name"`
	Kind string `json:"kind"`
	URL  string `json:"url"`
}

// Route sends alarms of Queues (all when empty) to Channel.
type Route struct {
	Channel string   `json:"channel"`
	Queues  []string `json:"queues,omitempty"`
}

// Rules are the built-in conditions' thresholds.
type Rules struct {
	// QueueStuck: the oldest scheduled job is older than this.
	QueueStuck Duration `json:"queue_stuck"`
	// FaultsPerHour: an agent exited 75 this many times in an hour.
	FaultsPerHour int `json:"faults_per_hour"`
	// For is how long a condition must hold before its alarm fires.
	For Duration `json:"for"`
}

// Config is an alerts file (kbgen serve --alerts).
type Config struct {
	Channels []Channel `json:"channels"`
	Routes   []Route   `json:"routes"`
	Rules    Rules     `json:"rules"`
}

// Duration is a time.Duration written as Go writes one ("10m").
type Duration time.Duration

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"10m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("bad duration %q", s)
	}
	*d = Duration(v)
	return nil
}

// Defaults of Rules.
const (
	DefaultQueueStuck    = 10 * time.Minute
	DefaultFaultsPerHour = 3
	DefaultFor           = 5 * time.Minute
)

// LoadConfig reads and checks an alerts file.
func LoadConfig(r io.Reader) (Config, error) {
	var c Config
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("alerts: %v", err)
	}
	return c, c.check()
}

func (c *Config) check() error {
	if c.Rules.QueueStuck == 0 {
		c.Rules.QueueStuck = Duration(DefaultQueueStuck)
	}
	if c.Rules.FaultsPerHour <= 0 {
		c.Rules.FaultsPerHour = DefaultFaultsPerHour
	}
	if c.Rules.For == 0 {
		c.Rules.For = Duration(DefaultFor)
	}
	names := map[string]bool{}
	for _, ch := range c.Channels {
		u, err := url.Parse(ch.URL)
		switch {
		case ch.Name == "" || names[ch.Name]:
			return fmt.Errorf("alerts: channel %q: a name, once", ch.Name)
		case ch.Kind != Slack && ch.Kind != Webhook:
			return fmt.Errorf("alerts: channel %s: kind %q is neither %q nor %q", ch.Name, ch.Kind, Slack, Webhook)
		case err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "":
			return fmt.Errorf("alerts: channel %s: the url must be http(s)://host/…", ch.Name)
		}
		names[ch.Name] = true
	}
	for _, r := range c.Routes {
		if !names[r.Channel] {
			return fmt.Errorf("alerts: a route names channel %q, which is not defined", r.Channel)
		}
	}
	return nil
}

// channelsFor is the channels an alarm of queue goes to ("" queue: the
// whole fleet's, routes without queues only).
func (c Config) channelsFor(queue string) []Channel {
	var out []Channel
	for _, r := range c.Routes {
		if len(r.Queues) > 0 && !slices.Contains(r.Queues, queue) {
			continue
		}
		for _, ch := range c.Channels {
			if ch.Name == r.Channel && !slices.ContainsFunc(out, func(x Channel) bool { return x.Name == ch.Name }) {
				out = append(out, ch)
			}
		}
	}
	return out
}
