package dashboard

import (
	"bytes"
	"net/http"
	"strings"
)

// CookieName is the session cookie: an opaque id, never the token.
const CookieName = "kbgen_session"

// csp lets the page use its own inline style and nothing else: no script,
// no fetch, no frame, forms only to itself.
const csp = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"

// Handler serves GET /dashboard (the page, or the login form), POST
// /dashboard/login and POST /dashboard/logout. build makes the page for a
// scope.
func Handler(a *Access, build func(Scope) Page) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /dashboard", func(w http.ResponseWriter, r *http.Request) {
		scope, err := a.request(r)
		if err != nil {
			login(w, http.StatusUnauthorized, "")
			return
		}
		var buf bytes.Buffer
		if err := Render(&buf, build(scope)); err != nil {
			http.Error(w, "rendering the dashboard failed", http.StatusInternalServerError)
			return
		}
		headers(w)
		_, _ = w.Write(buf.Bytes())
	})
	mux.HandleFunc("POST /dashboard/login", func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 4<<10)
		id, _, err := a.Login(r.PostFormValue("token"))
		if err != nil {
			login(w, http.StatusUnauthorized, "That token opens nothing here.")
			return
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: id, Path: "/dashboard", HttpOnly: true, SameSite: http.SameSiteStrictMode,
			Secure: r.TLS != nil, MaxAge: int(a.ttl.Seconds())})
		http.Redirect(w, r, "/dashboard", http.StatusSeeOther)
	})
	mux.HandleFunc("POST /dashboard/logout", func(w http.ResponseWriter, r *http.Request) {
		if c, err := r.Cookie(CookieName); err == nil {
			a.Logout(c.Value)
		}
		http.SetCookie(w, &http.Cookie{Name: CookieName, Value: "", Path: "/dashboard", HttpOnly: true, SameSite: http.SameSiteStrictMode, MaxAge: -1})
		http.Redirect(w, r, "/dashboard", http.StatusSeeOther)
	})
	return mux
}

// request is the scope of a request: its bearer token, else its session.
func (a *Access) request(r *http.Request) (Scope, error) {
	if tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return a.Token(tok)
	}
	if c, err := r.Cookie(CookieName); err == nil {
		return a.Session(c.Value)
	}
	return Scope{}, ErrDenied
}

func headers(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	h.Set("Referrer-Policy", "no-referrer")
}

func login(w http.ResponseWriter, code int, msg string) {
	var buf bytes.Buffer
	_ = RenderLogin(&buf, msg)
	headers(w)
	w.WriteHeader(code)
	_, _ = w.Write(buf.Bytes())
}
