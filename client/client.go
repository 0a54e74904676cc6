// Package client is kbgen's use of the Buildkite REST API: create a build
// for a Kernelbot job, poll it, cancel it, fetch result.json from the eval
// job's artifacts (following the 302 to storage without credentials), and
// summarise agents and waiting builds per queue. It never prints: progress
// goes to a callback, request logs to an io.Writer.
package client

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	buildkite "github.com/buildkite/go-buildkite/v4"
)

// DefaultAPIURL is Buildkite's REST API.
const DefaultAPIURL = "https://api.buildkite.com/"

// Options configure a Client.
type Options struct {
	APIURL   string // default DefaultAPIURL
	Org      string
	Pipeline string
	Token    string
	// MoreTokens are other users' tokens that kbgen serve's budget
	// rotates (WrapAPI sets each try's Authorization); like Token, they
	// never appear in a log or an error.
	MoreTokens []string
	// Debug, when set, receives one line per HTTP request and retry; the
	// token never appears in it.
	Debug io.Writer
	Clock Clock // default RealClock
	Retry Retry // default DefaultRetry
	// AttemptTimeout bounds the wait for one response's headers; a slower
	// response is abandoned and retried. Default 30s.
	AttemptTimeout time.Duration
	// UserAgent defaults to "kbgen".
	UserAgent string
	// WrapAPI, when set, wraps the transport of every API try (retries
	// included; storage downloads are not API requests): kbgen serve puts
	// its request budget there.
	WrapAPI func(http.RoundTripper) http.RoundTripper
}

// Client talks to one Buildkite organization and pipeline.
type Client struct {
	opts    Options
	bk      *buildkite.Client
	api     *transport
	storage *transport
	// noRedirect fetches an artifact's download URL without following the
	// 302, so the storage request is made by a client that holds no token.
	noRedirect    *http.Client
	storageClient *http.Client
}

// New checks the options and builds a client.
func New(opts Options) (*Client, error) {
	if opts.Token == "" {
		return nil, errors.New("no Buildkite API token")
	}
	if opts.Org == "" {
		return nil, errors.New("no Buildkite organization")
	}
	if opts.APIURL == "" {
		opts.APIURL = DefaultAPIURL
	}
	if !strings.HasSuffix(opts.APIURL, "/") {
		opts.APIURL += "/"
	}
	if !strings.HasPrefix(opts.APIURL, "http://") && !strings.HasPrefix(opts.APIURL, "https://") {
		return nil, fmt.Errorf("API URL %q is not an http(s) URL", opts.APIURL)
	}
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if opts.Retry.Attempts <= 0 {
		opts.Retry = DefaultRetry
	}
	if opts.AttemptTimeout <= 0 {
		opts.AttemptTimeout = 30 * time.Second
	}
	if opts.UserAgent == "" {
		opts.UserAgent = "kbgen"
	}
	c := &Client{opts: opts}
	c.api = c.newTransport("api")
	c.storage = c.newTransport("storage")
	apiHTTP := &http.Client{Transport: c.api}
	c.noRedirect = &http.Client{
		Transport:     c.api,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	c.storageClient = &http.Client{Transport: stripAuth{c.storage}}
	bk, err := buildkite.NewClient(
		buildkite.WithBaseURL(opts.APIURL),
		buildkite.WithTokenAuth(opts.Token),
		buildkite.WithHTTPClient(apiHTTP),
		buildkite.WithUserAgent(opts.UserAgent),
	)
	if err != nil {
		return nil, c.scrub(err)
	}
	c.bk = bk
	return c, nil
}

func (c *Client) newTransport(name string) *transport {
	base := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConnsPerHost:   4,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: c.opts.AttemptTimeout,
	}
	var rt http.RoundTripper = base
	if name == "api" && c.opts.WrapAPI != nil {
		rt = c.opts.WrapAPI(base)
	}
	return &transport{base: rt, retry: c.opts.Retry, clock: c.opts.Clock, debug: c.opts.Debug, redact: c.redact, name: name,
		hold: name == "api" && c.opts.WrapAPI == nil}
}

// Requests returns how many HTTP requests (tries included) the client
// has made to the API and to artifact storage.
func (c *Client) Requests() (api, storage int64) {
	return c.api.requests.Load(), c.storage.requests.Load()
}

// Clock is the clock the client waits on.
func (c *Client) Clock() Clock { return c.opts.Clock }

// redact removes the token from text that leaves the client.
func (c *Client) redact(s string) string {
	for _, t := range append([]string{c.opts.Token}, c.opts.MoreTokens...) {
		if t != "" {
			s = strings.ReplaceAll(s, t, "[REDACTED]")
		}
	}
	return s
}

// scrub makes an error that is safe to print: one line, no token, and for
// API errors the status and Buildkite's message rather than go-buildkite's
// raw body dump.
func (c *Client) scrub(err error) error {
	if err == nil {
		return nil
	}
	var apiErr *buildkite.ErrorResponse
	var urlErr *url.Error
	msg := err.Error()
	switch {
	case errors.As(err, &urlErr):
		// http.Client's "Get \"URL\": …" would print the host and query.
		path := urlErr.URL
		if u, perr := url.Parse(urlErr.URL); perr == nil {
			path = u.Path
		}
		reason := urlErr.Err.Error()
		var re *retryError
		if !errors.As(urlErr.Err, &re) {
			reason = describeNetErr(urlErr.Err)
		} else if re.permanent {
			return &APIError{Status: 429, Permanent: true, msg: c.redact(fmt.Sprintf("%s %s: %s", strings.ToUpper(urlErr.Op), path, reason))}
		}
		msg = fmt.Sprintf("%s %s: %s", strings.ToUpper(urlErr.Op), path, reason)
	case errors.As(err, &apiErr) && apiErr.Response != nil:
		msg = fmt.Sprintf("%s %s: %s", apiErr.Response.Request.Method, apiErr.Response.Request.URL.Path, apiErr.Response.Status)
		if m := strings.TrimSpace(apiErr.Message); m != "" {
			msg += ": " + m
		}
	}
	msg = strings.Join(strings.Fields(msg), " ")
	return &APIError{Status: statusOf(err), msg: c.redact(msg)}
}

// APIError is a failed exchange with Buildkite or its storage.
type APIError struct {
	Status int // HTTP status, 0 when no response came
	// Permanent: retrying later than now is pointless or unwelcome.
	Permanent bool
	msg       string
}

func (e *APIError) Error() string { return e.msg }

func statusOf(err error) int {
	var apiErr *buildkite.ErrorResponse
	if errors.As(err, &apiErr) && apiErr.Response != nil {
		return apiErr.Response.StatusCode
	}
	return 0
}

// stripAuth guarantees the storage host never sees credentials, whatever a
// caller put on the request.
type stripAuth struct{ next http.RoundTripper }

func (s stripAuth) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Header.Get("Authorization") != "" || req.Header.Get("Cookie") != "" {
		req = req.Clone(req.Context())
		req.Header.Del("Authorization")
		req.Header.Del("Cookie")
	}
	return s.next.RoundTrip(req)
}
