package serve

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/gpu-mode/kbgen/internal/exitcode"
)

// Endpoint is where kbgen serve listens: a loopback TCP address or a unix
// socket, or with TLS any TCP address. The policy is why: the service
// holds the Buildkite token and its clients send a bearer token, so that
// token never crosses a network in plain HTTP: without TLS nothing off
// the machine reaches it (a TLS proxy in front exposes it on purpose), TCP
// needs a bearer token (any local user can connect), and a socket is its
// owner's alone (0600).
type Endpoint struct {
	network, addr string
	tls           *tls.Config // nil: plain HTTP
}

// ParseListen checks --listen (127.0.0.1:PORT, localhost:PORT, [::1]:PORT,
// or unix:/path) against the policy, with token the server token clients
// must send. Errors carry exitcode.Usage.
func ParseListen(listen, token string) (Endpoint, error) {
	return ParseListenTLS(listen, token, "", "")
}

// ParseListenTLS is ParseListen with --tls-cert and --tls-key: with both,
// the service serves HTTPS itself and may listen on any TCP address (a
// private network between hosts); the pair is loaded here, so a bad one
// is exit 2 at once.
func ParseListenTLS(listen, token, certFile, keyFile string) (Endpoint, error) {
	e, err := parseListen(listen, certFile != "" || keyFile != "")
	if err == nil && e.network == "tcp" && token == "" {
		err = errors.New("KBGEN_SERVER_TOKEN is required to listen on TCP: clients send it as a bearer token")
	}
	if err == nil && (certFile != "" || keyFile != "") {
		e.tls, err = loadTLS(e, certFile, keyFile)
	}
	return e, exitcode.With(exitcode.Usage, err)
}

func parseListen(s string, withTLS bool) (Endpoint, error) {
	if path, ok := strings.CutPrefix(s, "unix:"); ok {
		if path == "" {
			return Endpoint{}, errors.New("--listen unix: needs a path, e.g. unix:/run/kbgen/serve.sock")
		}
		return Endpoint{network: "unix", addr: path}, nil
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("--listen %q: %v (want 127.0.0.1:PORT or unix:/path)", s, err)
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) && !withTLS {
		return Endpoint{}, fmt.Errorf("--listen %q: not a loopback address; kbgen serve runs beside the backend (to reach it from another host, give it --tls-cert and --tls-key, or put a TLS proxy in front)", s)
	}
	return Endpoint{network: "tcp", addr: s}, nil
}

// loadTLS reads the certificate and key for e (TCP only).
func loadTLS(e Endpoint, certFile, keyFile string) (*tls.Config, error) {
	switch {
	case e.network != "tcp":
		return nil, errors.New("--tls-cert and --tls-key are for a TCP --listen; a unix socket is its owner's alone")
	case certFile == "" || keyFile == "":
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert %s, --tls-key %s: %v", certFile, keyFile, err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}

// Listen opens the endpoint. A socket left by a killed service is
// replaced, and a new one is created 0600 from the start (no moment where
// another user could connect; the chmod only makes it explicit).
func (e Endpoint) Listen() (net.Listener, error) {
	if e.network != "unix" {
		ln, err := net.Listen(e.network, e.addr)
		if err != nil || e.tls == nil {
			return ln, err
		}
		return tls.NewListener(ln, e.tls), nil
	}
	_ = os.Remove(e.addr)
	old := syscall.Umask(0o177)
	ln, err := net.Listen("unix", e.addr)
	syscall.Umask(old)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(e.addr, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// where is how clients reach ln: http://HOST:PORT, https://HOST:PORT, or
// unix:PATH.
func (e Endpoint) where(ln net.Listener) string {
	switch {
	case e.network == "unix":
		return "unix:" + e.addr
	case e.tls != nil:
		return "https://" + ln.Addr().String()
	}
	return "http://" + ln.Addr().String()
}

// Run is kbgen serve once configured: listen at e first (a port in use
// is exit 2 at once, before any request to Buildkite), then start (resume
// this service's builds) and serve the API with token within lim until
// ctx ends. Buildkite failing at start or the listener failing later is
// exit 4 (exitcode.Infra).
func (s *Service) Run(ctx context.Context, e Endpoint, token string, lim Limits) error {
	ln, err := e.Listen()
	if err != nil {
		return exitcode.With(exitcode.Usage, fmt.Errorf("--listen %s: %w", e.addr, err))
	}
	if err := s.Start(ctx); err != nil {
		ln.Close()
		return exitcode.With(exitcode.Infra, err)
	}
	b := s.cfg.Budget
	s.say("kbgen serve: listening on %s (API budget %d/min: %d token(s) × %d/min, poll every %s, heartbeat every %s)", e.where(ln), b.Effective(), b.Users(), b.PerUser, s.PollEvery().Round(time.Millisecond), s.cfg.Heartbeat)
	if err := s.Serve(ctx, ln, token, lim); err != nil {
		return exitcode.With(exitcode.Infra, err)
	}
	s.say("kbgen serve: stopped; builds in flight go on and are resumed at the next start")
	return nil
}

// say writes one untimestamped line to the log: what the operator reads
// at start and stop (logf's lines are the service's events).
func (s *Service) say(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, format+"\n", args...)
}
