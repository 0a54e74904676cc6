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
//     one is closed), each for at most ReadHeaderTimeout;
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
	MaxWebhookBodies  int
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
}

// DefaultLimits are kbgen serve's.
var DefaultLimits = Limits{
	MaxConns:          1024,
	MaxPending:        64,
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
	g := &connGuard{max: lim.MaxPending, pending: map[net.Conn]time.Time{}}
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
// header yet) when there are more than max: a slow client cannot hold
// the server by opening connections and never finishing a request.
type connGuard struct {
	mu      sync.Mutex
	max     int
	pending map[net.Conn]time.Time
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
	var oldest net.Conn
	if len(g.pending) > g.max {
		var at time.Time
		for pc, t := range g.pending {
			if oldest == nil || t.Before(at) {
				oldest, at = pc, t
			}
		}
		delete(g.pending, oldest)
	}
	g.mu.Unlock()
	if oldest != nil {
		_ = oldest.Close()
	}
}

// served drops c from the pending set: a whole request header came (the
// handler runs), or the connection is gone.
func (g *connGuard) served(c net.Conn) {
	g.mu.Lock()
	delete(g.pending, c)
	g.mu.Unlock()
}
