package steps

import "testing"

func TestEscapeRoundTrip(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "plain", "$HOME", "${X:-y}", "$(id)", "$$", "a$$b$c", "\\$"} {
		e := Escape(s)
		for i := 0; i < len(e); i++ {
			if e[i] == '$' {
				if i+1 >= len(e) || e[i+1] != '$' {
					t.Fatalf("Escape(%q) = %q leaves a lone $", s, e)
				}
				i++
			}
		}
		if got := Unescape(e); got != s {
			t.Errorf("Unescape(Escape(%q)) = %q", s, got)
		}
	}
}
