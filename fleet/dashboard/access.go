package dashboard

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Scope is what one token may see: every queue (Queues nil) or a
// vendor's.
type Scope struct {
	Name   string   `json:"vendor"`
	Token  string   `json:"token"`
	Queues []string `json:"queues"`
}

// All reports whether the scope sees every queue.
func (s Scope) All() bool { return s.Queues == nil }

// Sees reports whether the scope may see queue.
func (s Scope) Sees(queue string) bool { return s.All() || slices.Contains(s.Queues, queue) }

// minTokenLen bounds a vendor token from below: a guessable one would
// show a vendor's fleet to anyone.
const minTokenLen = 16

// ErrVendorTokens is a vendor token file that cannot be used (not the
// JSON it should be, a short or shared token, an entry without queues):
// the dashboard must not start on it.
var ErrVendorTokens = errors.New("vendor tokens")

// LoadVendorTokens reads a vendor token file: a JSON list of
// {"vendor", "token", "queues"}; each needs a name, a token of 16 bytes or
// more used once, and at least one queue.
func LoadVendorTokens(r io.Reader) ([]Scope, error) {
	var scopes []Scope
	dec := json.NewDecoder(io.LimitReader(r, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&scopes); err != nil {
		return nil, fmt.Errorf("%w: not a JSON list of {vendor, token, queues}: %v", ErrVendorTokens, err)
	}
	seen := map[string]bool{}
	for i, s := range scopes {
		switch {
		case s.Name == "":
			return nil, fmt.Errorf("%w: entry %d has no vendor", ErrVendorTokens, i+1)
		case len(s.Token) < minTokenLen:
			return nil, fmt.Errorf("%w: %s's token is shorter than %d bytes", ErrVendorTokens, s.Name, minTokenLen)
		case len(s.Queues) == 0:
			return nil, fmt.Errorf("%w: %s names no queue", ErrVendorTokens, s.Name)
		case seen[s.Token]:
			return nil, fmt.Errorf("%w: %s's token is another entry's too", ErrVendorTokens, s.Name)
		}
		seen[s.Token] = true
	}
	return scopes, nil
}

// Access is who may see the dashboard: the scopes by token, and the
// sessions the login form made.
type Access struct {
	scopes []Scope
	ttl    time.Duration
	now    func() time.Time

	mu       sync.Mutex
	sessions map[string]session
}

type session struct {
	scope   Scope
	expires time.Time
}

// SessionTTL is how long a login lasts.
const SessionTTL = 12 * time.Hour

// maxSessions bounds the sessions kept: a login flood drops the oldest.
const maxSessions = 1024

// NewAccess is access for tokens that see every queue (the view token,
// the server token; "" is skipped) and the vendors' tokens.
func NewAccess(all []string, vendors []Scope, now func() time.Time) *Access {
	a := &Access{ttl: SessionTTL, now: now, sessions: map[string]session{}}
	if a.now == nil {
		a.now = time.Now
	}
	for _, t := range all {
		if t != "" {
			a.scopes = append(a.scopes, Scope{Name: "all", Token: t})
		}
	}
	a.scopes = append(a.scopes, vendors...)
	return a
}

// ErrDenied is a token or session that grants nothing.
var ErrDenied = errors.New("dashboard: wrong token")

// Token is the scope of token, comparing each in constant time.
func (a *Access) Token(token string) (Scope, error) {
	found, ok := Scope{}, false
	for _, s := range a.scopes {
		if subtle.ConstantTimeCompare([]byte(token), []byte(s.Token)) == 1 {
			found, ok = s, true
		}
	}
	if !ok || token == "" {
		return Scope{}, ErrDenied
	}
	return found, nil
}

// Login makes a session for token: its id goes in the cookie, never the
// token.
func (a *Access) Login(token string) (string, Scope, error) {
	s, err := a.Token(token)
	if err != nil {
		return "", Scope{}, err
	}
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", Scope{}, err
	}
	id := hex.EncodeToString(b)
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expireLocked()
	if len(a.sessions) >= maxSessions {
		a.dropOldestLocked()
	}
	a.sessions[id] = session{scope: s, expires: a.now().Add(a.ttl)}
	return id, s, nil
}

// Session is the scope of a live session id.
func (a *Access) Session(id string) (Scope, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sessions[id]
	if !ok || !a.now().Before(s.expires) {
		delete(a.sessions, id)
		return Scope{}, ErrDenied
	}
	return s.scope, nil
}

// Logout ends a session.
func (a *Access) Logout(id string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.sessions, id)
}

func (a *Access) expireLocked() {
	now := a.now()
	for id, s := range a.sessions {
		if !now.Before(s.expires) {
			delete(a.sessions, id)
		}
	}
}

func (a *Access) dropOldestLocked() {
	oldest, at := "", time.Time{}
	for id, s := range a.sessions {
		if oldest == "" || s.expires.Before(at) {
			oldest, at = id, s.expires
		}
	}
	delete(a.sessions, oldest)
}
