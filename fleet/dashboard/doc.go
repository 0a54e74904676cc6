// Package dashboard is kbgen serve's /dashboard: who may see it (the view
// token, or a vendor's token that sees only its own queues, by bearer
// header or through a login form that sets an HttpOnly, SameSite=Strict
// session cookie) and the page itself, server-rendered into one
// self-contained HTML document (inline CSS and SVG, no script, readable
// without JavaScript). serve builds the Page; this package only judges
// access and renders.
package dashboard
