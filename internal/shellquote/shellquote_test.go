package shellquote

import (
	"os/exec"
	"strings"
	"testing"
)

// The expected values are Python 3's shlex.quote of each input.
var cases = []struct{ in, want string }{
	{"", "''"},
	{"plain", "plain"},
	{"a b", "'a b'"},
	{"it's", `'it'"'"'s'`},
	{"$HOME", "'$HOME'"},
	{"-DNAME=1", "-DNAME=1"},
	{"a;b", "'a;b'"},
	{"über", "'über'"},
	{"x\ny", "'x\ny'"},
	{"@%+=:,./-_", "@%+=:,./-_"},
	{"GPU-1234", "GPU-1234"},
	{"/dev/dri/renderD128", "/dev/dri/renderD128"},
}

func TestQuoteIsShlexQuote(t *testing.T) {
	t.Parallel()
	for _, c := range cases {
		if got := Quote(c.in); got != c.want {
			t.Errorf("Quote(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

func TestJoinIsMakeCmd(t *testing.T) {
	t.Parallel()
	got := Join([]string{"python3", "eval.py", "it's a test", ""})
	want := `python3 eval.py 'it'"'"'s a test' ''`
	if got != want {
		t.Errorf("Join = %q, want %q", got, want)
	}
}

// TestQuoteRoundTripsThroughSh checks what the rule is for: a quoted word
// reads back as the original in a POSIX shell.
func TestQuoteRoundTripsThroughSh(t *testing.T) {
	t.Parallel()
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh on PATH")
	}
	var words []string
	for _, c := range cases {
		words = append(words, c.in)
	}
	out, err := exec.Command(sh, "-c", `for a in `+Join(words)+`; do printf '%s\0' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Split(strings.TrimSuffix(string(out), "\x00"), "\x00")
	if strings.Join(got, "|") != strings.Join(words, "|") {
		t.Errorf("sh read back %q, want %q", got, words)
	}
}
