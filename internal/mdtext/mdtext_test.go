package mdtext_test

import (
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/mdtext"
	"github.com/gpu-mode/kbgen/internal/mdtext/mdtexttest"
)

// TestCodeIsInertInATableCell renders each hostile string in a table
// cell and in a line of text: no link, image or HTML comes out, the
// table keeps its one body row, and the text reads back as given.
func TestCodeIsInertInATableCell(t *testing.T) {
	t.Parallel()
	for name, s := range mdtexttest.Hostile {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			md := "| a | b |\n| --- | --- |\n| " + mdtext.Code(s) + " | end |\n\nstatus: " + mdtext.Code(s) + "\n"
			html := mdtexttest.Render(t, md)
			mdtexttest.Inert(t, html, 2)
			if !strings.Contains(html, "<td>end</td>") {
				t.Errorf("the second cell moved:\n%s", html)
			}
			if strings.Count(html, "<code>") != 2 {
				t.Errorf("want two code spans:\n%s", html)
			}
		})
	}
}

func TestCode(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, in, want string }{
		{"plain", "size: 8", "`size: 8`"},
		{"pipe", "a|b", "`a\\|b`"},
		{"backticks", "a``b", "```a``b```"},
		{"edge backtick", "`x", "`` `x ``"},
		{"newline", "a\r\nb", "`a  b`"},
		{"escape", "\x1b[31m", "`\ufffd[31m`"},
		{"bidi", "a\u202eb", "`a\ufffdb`"},
		{"empty", "", "—"},
		{"blank", " \n", "—"},
		{"bad utf-8", "a\xffb", "`a\ufffdb`"},
		{"real U+FFFD", "a\ufffdb", "`a\ufffdb`"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := mdtext.Code(tt.in); got != tt.want {
				t.Errorf("Code(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestCleanCuts(t *testing.T) {
	t.Parallel()
	got := mdtext.Clean(strings.Repeat("é", 500), 10)
	if got != strings.Repeat("é", 5)+"…" {
		t.Errorf("Clean cut to %q", got)
	}
}
