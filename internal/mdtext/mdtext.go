// Package mdtext is the one escaping of untrusted text for Buildkite's
// annotation renderer. Buildkite renders annotations as CommonMark with
// GitHub-flavoured extensions (tables, autolinks) and a sanitised subset
// of HTML (<a>, <img>, <details>, …): buildkite/docs
// pages/pipelines/configure/annotations.md, "Supported Markdown syntax"
// and "HTML limitations". Everything a submission controls (exception
// messages, run keys, case specs, anything read back from result.json or
// noise.json) goes through Code before it reaches an annotation.
package mdtext

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxCell bounds one escaped string, in bytes of its text before
// escaping: a table cell, never a page.
const MaxCell = 240

// Code renders untrusted s as one inline code span safe inside a GFM
// table cell. Inside a code span CommonMark interprets nothing (no links,
// images, autolinks, emphasis, entities or raw HTML: spec 6.1), so the
// span is the whole defence, provided s cannot end it or the table row:
//   - control characters (\r, \n, tab, ESC, DEL, C1) and Unicode bidi
//     overrides become U+FFFD or a space, so s stays on its row and reads
//     in the order it is stored;
//   - '|' is written "\|", GFM's escape for a pipe in a cell, which holds
//     inside code spans too (GFM spec, tables, example 200);
//   - the fence is one backtick longer than the longest backtick run in s,
//     padded with a space when s starts or ends with a backtick (spec 6.1).
//
// s is cut at MaxCell bytes (on a rune boundary) with "…" appended. An
// empty or blank s is rendered "—" (an empty code span is not one).
func Code(s string) string {
	s = Clean(s, MaxCell)
	if strings.TrimSpace(s) == "" {
		return "—"
	}
	s = strings.ReplaceAll(s, "|", `\|`)
	fence := strings.Repeat("`", longestRun(s, '`')+1)
	if strings.HasPrefix(s, "`") || strings.HasSuffix(s, "`") || strings.HasPrefix(s, " ") && strings.HasSuffix(s, " ") {
		s = " " + s + " "
	}
	return fence + s + fence
}

// Clean makes s one printable line of at most limit bytes: line breaks
// and tabs become spaces, other control characters, bidi controls and
// invalid UTF-8 become U+FFFD, and a longer s is cut with "…". Terminal
// escapes (ESC) cannot survive it.
func Clean(s string, limit int) string {
	var b strings.Builder
	for i, r := range s {
		if b.Len() >= limit {
			b.WriteString("…")
			break
		}
		switch {
		case r == utf8.RuneError && !isRealRuneError(s[i:]):
			b.WriteRune(unicode.ReplacementChar)
		case r == '\n' || r == '\r' || r == '\t' || r == '\v' || r == '\f' || r == 0x85 || r == 0x2028 || r == 0x2029:
			b.WriteByte(' ')
		case unicode.IsControl(r) || isBidi(r):
			b.WriteRune(unicode.ReplacementChar)
		default:
			b.WriteRune(r)
		}
	}
	return b.String()
}

// isRealRuneError reports whether s starts with an encoded U+FFFD rather
// than an invalid byte.
func isRealRuneError(s string) bool {
	r, n := utf8.DecodeRuneInString(s)
	return r == utf8.RuneError && n == 3
}

// isBidi reports the Unicode bidirectional formatting characters, which
// reorder what a reader sees ("Trojan Source").
func isBidi(r rune) bool {
	return r >= 0x202A && r <= 0x202E || r >= 0x2066 && r <= 0x2069 || r == 0x200E || r == 0x200F || r == 0x061C
}

func longestRun(s string, c byte) int {
	best, n := 0, 0
	for i := 0; i < len(s); i++ {
		if s[i] == c {
			n++
			best = max(best, n)
		} else {
			n = 0
		}
	}
	return best
}
