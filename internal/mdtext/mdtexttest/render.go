package mdtexttest

import (
	"bytes"
	"regexp"
	"strings"
	"testing"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/extension"
	"github.com/yuin/goldmark/renderer/html"
)

var gfm = goldmark.New(goldmark.WithExtensions(extension.GFM), goldmark.WithRendererOptions(html.WithUnsafe()))

// Render is md as HTML.
func Render(t testing.TB, md string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := gfm.Convert([]byte(md), &buf); err != nil {
		t.Fatalf("rendering markdown: %v", err)
	}
	return buf.String()
}

// activeTag is any HTML element that a submission could use to show a
// link, an image or markup of its own; kbgen's own annotation uses none
// of these.
var activeTag = regexp.MustCompile(`(?i)<\s*(a|img|script|style|iframe|details|summary|span|div|p\s|h[1-6]|pre|svg|video|object|embed|form|input|button)\b`)

// Inert fails t when html holds a link, an image or a raw HTML element
// (except the table and code elements kbgen writes), or when a row count
// differs from rows (-1: do not check): a hostile string must stay in its
// cell.
func Inert(t testing.TB, html string, rows int) {
	t.Helper()
	if m := activeTag.FindString(html); m != "" {
		t.Errorf("rendered annotation holds %q:\n%s", m, html)
	}
	if strings.Contains(html, "\x1b") || strings.Contains(html, "\r") {
		t.Errorf("rendered annotation holds a control character:\n%q", html)
	}
	if got := strings.Count(html, "<tr>"); rows >= 0 && got != rows {
		t.Errorf("rendered annotation has %d table rows, want %d:\n%s", got, rows, html)
	}
}

// Hostile are the strings a submission would put in its exception
// messages, run keys and result fields to attack an annotation.
var Hostile = map[string]string{
	"link":           "[claim your prize](https://evil.example/login)",
	"image":          "![x](https://evil.example/pixel.png)",
	"autolink":       "see https://evil.example/x and www.evil.example",
	"angle autolink": "<https://evil.example/>",
	"raw html":       `<a href="https://evil.example">ok</a><img src=x onerror=alert(1)><script>alert(1)</script>`,
	"details":        "<details><summary>passed</summary>hidden</details>",
	"new row":        "x |\n| forged | row | | all passed |",
	"carriage ret":   "passed\r| forged | row |",
	"code break":     "`` ` ``[link](https://evil.example)``",
	"pipes":          `a\|b\\|c|d`,
	"ansi":           "\x1b[32mpassed\x1b[0m\x1b]1339;url=https://evil.example\x07",
	"bidi":           "\u202etxt.exe",
	"mention":        "@everyone @here <@123456> :rotating_light:",
	"emphasis":       "**all runs passed** _x_ ~~y~~",
	"entity":         "&lt;a href=x&gt;&#60;img&#62;",
	"heading":        "# all runs passed\n---",
	"long":           strings.Repeat("[x](https://evil.example)", 400),
	"backslashes":    `\\\\` + "`" + `\` + "`",
}
