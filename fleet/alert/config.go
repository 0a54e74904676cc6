package alert

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

// Receiver kinds.
const (
	// KindSlack is a Slack incoming webhook: POST {"text": …}
	// (https://api.slack.com/messaging/webhooks).
	KindSlack = "slack"
	// KindWebhook is a generic JSON webhook: POST the transition (Payload).
	KindWebhook = "webhook"
)

// Config is the alerts file (kbgen serve --alerts): receivers, and which
// of them get which vendor's and queue's alarms.
type Config struct {
	Receivers []Receiver `yaml:"receivers"`
	Routes    []Route    `yaml:"routes"`
}

// Receiver is one place alarms go. Its URL is a secret (a Slack webhook's
// URL is its credential): it is never logged or put in an error.
type Receiver struct {
	Name string `yaml:"name"`
	Kind string `yaml:"kind"`
	// URL, or URLFile: a file holding it (kept out of the config file).
	URL     string `yaml:"url,omitempty"`
	URLFile string `yaml:"url_file,omitempty"`
}

// Route sends the alarms it matches to its receivers. Vendors and Queues
// are ORed within a list and ANDed between the lists; a route with
// neither matches every alarm, those without a queue too (the API
// budget). Every matching route applies.
type Route struct {
	Vendors   []string `yaml:"vendors,omitempty"`
	Queues    []string `yaml:"queues,omitempty"`
	Receivers []string `yaml:"receivers"`
}

// LoadConfig reads and checks the alerts file at path, and each
// receiver's url_file.
func LoadConfig(path string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return Config{}, fmt.Errorf("%s: %w", path, err)
	}
	for i, r := range c.Receivers {
		if r.URLFile == "" {
			continue
		}
		u, err := os.ReadFile(r.URLFile)
		if err != nil {
			return Config{}, fmt.Errorf("%s: receiver %s: %w", path, r.Name, err)
		}
		c.Receivers[i].URL = strings.TrimSpace(string(u))
		if err := checkURL(c.Receivers[i].URL); err != nil {
			return Config{}, fmt.Errorf("%s: receiver %s: url_file %s: %w", path, r.Name, r.URLFile, err)
		}
	}
	return c, nil
}

// ErrConfig is an alerts file that cannot be used (an unknown key, a
// receiver named twice, a route to nowhere): the service must not start
// on it. The error's text says what to fix and never repeats a URL.
var ErrConfig = errors.New("alerts config")

// ParseConfig reads an alerts file; unknown keys are errors. Its errors
// wrap ErrConfig.
func ParseConfig(b []byte) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		return Config{}, fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return c, c.check()
}

func (c Config) check() error {
	names := map[string]bool{}
	for _, r := range c.Receivers {
		if err := r.check(); err != nil {
			return err
		}
		if names[r.Name] {
			return fmt.Errorf("%w: receiver %s is named twice", ErrConfig, r.Name)
		}
		names[r.Name] = true
	}
	for i, rt := range c.Routes {
		if len(rt.Receivers) == 0 {
			return fmt.Errorf("%w: route %d names no receiver", ErrConfig, i+1)
		}
		for _, n := range rt.Receivers {
			if !names[n] {
				return fmt.Errorf("%w: route %d names receiver %q, which is not defined", ErrConfig, i+1, n)
			}
		}
	}
	return nil
}

func (r Receiver) check() error {
	if r.Name == "" {
		return fmt.Errorf("%w: a receiver has no name", ErrConfig)
	}
	if r.Kind != KindSlack && r.Kind != KindWebhook {
		return fmt.Errorf("%w: receiver %s: kind %q, want %s or %s", ErrConfig, r.Name, r.Kind, KindSlack, KindWebhook)
	}
	if (r.URL == "") == (r.URLFile == "") {
		return fmt.Errorf("%w: receiver %s: give one of url and url_file", ErrConfig, r.Name)
	}
	if r.URL != "" {
		if err := checkURL(r.URL); err != nil {
			return fmt.Errorf("%w: receiver %s: %w", ErrConfig, r.Name, err)
		}
	}
	return nil
}

// checkURL accepts an absolute http or https URL; the error never
// repeats it.
func checkURL(s string) error {
	u, err := url.Parse(s)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return errors.New("the URL is not an absolute http(s) URL")
	}
	return nil
}

// ReceiversFor is the names of the receivers that get a, each once, in the
// order the config defines them.
func (c Config) ReceiversFor(a Alarm) []string {
	want := map[string]bool{}
	for _, rt := range c.Routes {
		if rt.matches(a.Labels) {
			for _, n := range rt.Receivers {
				want[n] = true
			}
		}
	}
	var out []string
	for _, r := range c.Receivers {
		if want[r.Name] {
			out = append(out, r.Name)
		}
	}
	return out
}

func (rt Route) matches(labels map[string]string) bool {
	if len(rt.Vendors) > 0 && !slices.ContainsFunc(rt.Vendors, func(v string) bool { return strings.EqualFold(v, labels["vendor"]) }) {
		return false
	}
	return len(rt.Queues) == 0 || slices.Contains(rt.Queues, labels["queue"])
}
