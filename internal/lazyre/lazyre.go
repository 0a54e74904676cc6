// Package lazyre is a regular expression compiled on first use rather than
// at package init. Every kbgen command pays for every linked package's
// init, so a package-level regexp.MustCompile in the sandbox or the node
// planner used to slow `kbgen generate` (the bootstrap step, whose
// whole-process time has a 15 ms goal) for patterns it never matches.
package lazyre

import (
	"regexp"
	"sync"
)

// Regexp is a pattern compiled once, when first matched. A pattern that
// does not compile panics there, as regexp.MustCompile would at init: the
// package's tests match each of its patterns, so they find it.
type Regexp struct {
	compiled func() *regexp.Regexp
}

// New returns expr, to be compiled on first use.
func New(expr string) *Regexp {
	return &Regexp{compiled: sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })}
}

// Regexp is the compiled pattern, for methods this type does not forward.
func (r *Regexp) Regexp() *regexp.Regexp { return r.compiled() }

// MatchString is regexp.Regexp.MatchString.
func (r *Regexp) MatchString(s string) bool { return r.compiled().MatchString(s) }

// FindStringSubmatch is regexp.Regexp.FindStringSubmatch.
func (r *Regexp) FindStringSubmatch(s string) []string { return r.compiled().FindStringSubmatch(s) }

// FindSubmatch is regexp.Regexp.FindSubmatch.
func (r *Regexp) FindSubmatch(b []byte) [][]byte { return r.compiled().FindSubmatch(b) }

// ReplaceAllString is regexp.Regexp.ReplaceAllString.
func (r *Regexp) ReplaceAllString(src, repl string) string {
	return r.compiled().ReplaceAllString(src, repl)
}
