package serve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"golang.org/x/net/netutil"
)

// Limits bound what clients can hold of the service's HTTP server. The
// API's clients are the backend (with the bearer token) and Buildkite's
// webhooks; anyone who can reach the port can open connections, so what
// an unauthenticated client can hold is small and short:
//   - a connection that has not sent a whole request header yet is
//     "pending": at most MaxPending at once (past it, the oldest pending
//     one is closed once it has been pending PendingGrace), each for at
//     most ReadHeaderTimeout. The grace is what keeps a burst of real
//     clients whole: each sends its header the moment it connects, so a
//     burst of more than MaxPending at once (200 Kernelbot submissions
//     arriving together) is young, while a slow client's connection ages;
//     closing the oldest regardless dropped 50 of 200 runs' first request
//     in scripts/servebench;
//   - a request without the bearer token is answered with
//     "Connection: close", so it cannot stay as an idle keep-alive;
//   - webhook bodies (read before their signature can be checked) are
//     read MaxWebhookBodies at a time (past it: 503 at once), each within
//     ReadTimeout;
//   - MaxConns bounds all connections together (netutil.LimitListener).
//
// The event stream (GET /v1/runs/ID/events) lives as long as its run: it
// clears its read deadline, and there is no write timeout.
type Limits struct {
	MaxConns          int
	MaxPending        int
	PendingGrace      time.Duration
	MaxWebhookBodies  int
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
}

// DefaultLimits are kbgen serve's.
var DefaultLimits = Limits{
	MaxConns:          1024,
	MaxPending:        64,
	PendingGrace:      500 * time.Millisecond,
	MaxWebhookBodies:  16,
	ReadHeaderTimeout: 5 * time.Second,
	ReadTimeout:       30 * time.Second,
	IdleTimeout:       90 * time.Second,
}

func (l Limits) withDefaults() Limits {
	d := DefaultLimits
	if l.MaxConns <= 0 {
		l.MaxConns = d.MaxConns
	}
	if l.MaxPending <= 0 {
		l.MaxPending = d.MaxPending
	}
	if l.PendingGrace <= 0 {
		l.PendingGrace = d.PendingGrace
	}
	if l.MaxWebhookBodies <= 0 {
		l.MaxWebhookBodies = d.MaxWebhookBodies
	}
	if l.ReadHeaderTimeout <= 0 {
		l.ReadHeaderTimeout = d.ReadHeaderTimeout
	}
	if l.ReadTimeout <= 0 {
		l.ReadTimeout = d.ReadTimeout
	}
	if l.IdleTimeout <= 0 {
		l.IdleTimeout = d.IdleTimeout
	}
	return l
}

// Listener caps ln at MaxConns connections at once.
func (l Limits) Listener(ln net.Listener) net.Listener {
	return netutil.LimitListener(ln, l.withDefaults().MaxConns)
}

// HTTPServer is the service's API (Handler) behind the limits; serve it
// on lim.Listener(ln).
func (s *Service) HTTPServer(token string, lim Limits) *http.Server {
	lim = lim.withDefaults()
	g := &connGuard{max: lim.MaxPending, grace: lim.PendingGrace, pending: map[net.Conn]time.Time{}}
	s.webhookSlots = make(chan struct{}, lim.MaxWebhookBodies)
	h := s.Handler(token)
	return &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if c, ok := r.Context().Value(connKey{}).(net.Conn); ok {
				g.served(c)
			}
			if token == "" || !bearerOK(r.Header.Get("Authorization"), token) {
				w.Header().Set("Connection", "close")
			}
			h.ServeHTTP(w, r)
		}),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		ReadTimeout:       lim.ReadTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
		ConnState: g.state,
	}
}

// Serve serves the API on ln within lim until ctx is done, then shuts
// down (5 s for requests in flight). It returns nil after ctx, else the
// listener's error.
func (s *Service) Serve(ctx context.Context, ln net.Listener, token string, lim Limits) error {
	srv := s.HTTPServer(token, lim)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(lim.Listener(ln)) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
	}
	sctx, done := context.WithTimeout(context.Background(), 5*time.Second)
	defer done()
	_ = srv.Shutdown(sctx)
	return nil
}

type connKey struct{}

// connGuard closes the oldest pending connection (no whole request
// header yet) when there are more than max and it has been pending at
// least grace: a slow client cannot hold the server by opening
// connections and never finishing a request, and a burst of real clients
// is not cut (see Limits).
type connGuard struct {
	mu      sync.Mutex
	max     int
	grace   time.Duration
	pending map[net.Conn]time.Time
	timer   *time.Timer // a later evict while young connections are over max
}

func (g *connGuard) state(c net.Conn, st http.ConnState) {
	if st != http.StateNew {
		if st == http.StateClosed || st == http.StateHijacked {
			g.served(c)
		}
		return
	}
	g.mu.Lock()
	g.pending[c] = time.Now()
	g.mu.Unlock()
	g.evict()
}

// evict closes the oldest pending connections past max that are older
// than grace; when the oldest is younger, it looks again once that one
// has aged, so slow connections that arrived together are still closed
// without waiting for another arrival.
func (g *connGuard) evict() {
	var closing []net.Conn
	g.mu.Lock()
	for len(g.pending) > g.max {
		oldest, at := g.oldest()
		if age := time.Since(at); age < g.grace {
			if g.timer == nil {
				g.timer = time.AfterFunc(g.grace-age, g.retry)
			}
			break
		}
		delete(g.pending, oldest)
		closing = append(closing, oldest)
	}
	g.mu.Unlock()
	for _, c := range closing {
		_ = c.Close()
	}
}

func (g *connGuard) retry() {
	g.mu.Lock()
	g.timer = nil
	g.mu.Unlock()
	g.evict()
}

// oldest is the pending connection that arrived first; g.mu is held.
func (g *connGuard) oldest() (net.Conn, time.Time) {
	var oldest net.Conn
	var at time.Time
	for pc, t := range g.pending {
		if oldest == nil || t.Before(at) {
			oldest, at = pc, t
		}
	}
	return oldest, at
}

// served drops c from the pending set: a whole request header came (the
// handler runs), or the connection is gone.
func (g *connGuard) served(c net.Conn) {
	g.mu.Lock()
	delete(g.pending, c)
	g.mu.Unlock()
}
