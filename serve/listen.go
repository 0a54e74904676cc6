package serve

import (
	"context"
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
// socket. The policy is why: the service holds the Buildkite token and
// runs beside the backend, so nothing off the machine reaches it (a TLS
// proxy in front exposes it on purpose), TCP needs a bearer token (any
// local user can connect), and a socket is its owner's alone (0600).
type Endpoint struct {
	network, addr string
}

// ParseListen checks --listen (127.0.0.1:PORT, localhost:PORT, [::1]:PORT,
// or unix:/path) against the policy, with token the server token clients
// must send. Errors carry exitcode.Usage.
func ParseListen(listen, token string) (Endpoint, error) {
	e, err := parseListen(listen)
	if err == nil && e.network == "tcp" && token == "" {
		err = errors.New("KBGEN_SERVER_TOKEN is required to listen on TCP: clients send it as a bearer token")
	}
	return e, exitcode.With(exitcode.Usage, err)
}

func parseListen(s string) (Endpoint, error) {
	if path, ok := strings.CutPrefix(s, "unix:"); ok {
		if path == "" {
			return Endpoint{}, errors.New("--listen unix: needs a path, e.g. unix:/run/kbgen/serve.sock")
		}
		return Endpoint{"unix", path}, nil
	}
	host, _, err := net.SplitHostPort(s)
	if err != nil {
		return Endpoint{}, fmt.Errorf("--listen %q: %v (want 127.0.0.1:PORT or unix:/path)", s, err)
	}
	ip := net.ParseIP(host)
	if host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return Endpoint{}, fmt.Errorf("--listen %q: not a loopback address; kbgen serve runs beside the backend (put a TLS proxy in front to expose it)", s)
	}
	return Endpoint{"tcp", s}, nil
}

// Listen opens the endpoint. A socket left by a killed service is
// replaced, and a new one is created 0600 from the start (no moment where
// another user could connect; the chmod only makes it explicit).
func (e Endpoint) Listen() (net.Listener, error) {
	if e.network != "unix" {
		return net.Listen(e.network, e.addr)
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

// where is how clients reach ln: http://HOST:PORT, or unix:PATH.
func (e Endpoint) where(ln net.Listener) string {
	if e.network == "unix" {
		return "unix:" + e.addr
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
