package sandbox

import (
	"bytes"
	"strings"
	"testing"
)

// TestJobLog: whatever the container writes, every line in the job log
// starts with LogPrefix and no control character survives.
func TestJobLog(t *testing.T) {
	t.Parallel()
	p := LogPrefix
	tests := []struct {
		name   string
		writes []string // to stdout, one Write each
		want   string
	}{
		{"plain lines", []string{"a\nb\n"}, p + "a\n" + p + "b\n"},
		{"group markers", []string{"~~~ fake\n--- fake\n+++ fake\n^^^ +++\n"}, p + "~~~ fake\n" + p + "--- fake\n" + p + "+++ fake\n" + p + "^^^ +++\n"},
		{"ANSI colour", []string{"\x1b[31mred\x1b[0m\n"}, p + `\x1b[31mred\x1b[0m` + "\n"},
		{"OSC 1339 link", []string{"\x1b]1339;url=http://evil;content=click\x07\n"}, p + `\x1b]1339;url=http://evil;content=click\x07` + "\n"},
		{"agent timestamp APC", []string{"\x1b_bk;t=1\x07--- x\n"}, p + `\x1b_bk;t=1\x07--- x` + "\n"},
		{"carriage return starts a line", []string{"ok\r~~~ fake\n"}, p + "ok\n" + p + "~~~ fake\n"},
		{"CRLF is one line end", []string{"a\r\nb\r\n"}, p + "a\n" + p + "b\n"},
		{"CRLF across writes", []string{"a\r", "\nb\n"}, p + "a\n" + p + "b\n"},
		{"tab kept", []string{"a\tb\n"}, p + "a\tb\n"},
		{"C1 CSI", []string{"x\u009b31m\n"}, p + `x\x9b31m` + "\n"},
		{"bidi override", []string{"abc\u202edef\n"}, p + `abc\u202edef` + "\n"},
		{"invalid UTF-8", []string{"a\xffb\n"}, p + `a\xffb` + "\n"},
		{"UTF-8 split across writes", []string{"caf\xc3", "\xa9\n"}, p + "café\n"},
		{"a line cut off at the end", []string{"no newline"}, p + "no newline\n"},
		{"an incomplete rune at the end", []string{"x\xe2\x82"}, p + `x\xe2\x82` + "\n"},
		{"empty line", []string{"\n"}, p + "\n"},
		{"NUL bytes", []string{"\x00\x00\n"}, p + `\x00\x00` + "\n"},
		{"a line in pieces", []string{"~~", "~ x\n"}, p + "~~~ x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out bytes.Buffer
			j := NewJobLog(1 << 20)
			w := j.Stream(&out)
			for _, s := range tt.writes {
				if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
			}
			if d := j.Close(); d != 0 {
				t.Errorf("dropped %d", d)
			}
			if out.String() != tt.want {
				t.Errorf("log = %q, want %q", out.String(), tt.want)
			}
		})
	}
}

// TestJobLogStreams: a line one stream leaves open is ended before the
// other writes, so text after the other's newline cannot start a line
// unprefixed.
func TestJobLogStreams(t *testing.T) {
	t.Parallel()
	var log bytes.Buffer
	j := NewJobLog(1 << 20)
	out, errw := j.Stream(&log), j.Stream(&log)
	for _, w := range []struct {
		w interface{ Write([]byte) (int, error) }
		s string
	}{{out, "x"}, {errw, "\n"}, {out, "~~~ fake\n"}} {
		_, _ = w.w.Write([]byte(w.s))
	}
	j.Close()
	for _, line := range strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n") {
		if !strings.HasPrefix(line, LogPrefix) {
			t.Errorf("line %q has no prefix; log %q", line, log.String())
		}
	}
}

// TestJobLogCap: the cap is on what reaches the log (escapes and
// prefixes included, so a flood of control bytes cannot amplify past
// it); past it nothing more is written, the rest is counted, and the
// writer keeps accepting (the container never blocks).
func TestJobLogCap(t *testing.T) {
	t.Parallel()
	var out bytes.Buffer
	j := NewJobLog(int64(len(LogPrefix)) + 9 + int64(len(LogPrefix)) + 3)
	w := j.Stream(&out)
	for _, s := range []string{"12345678\n", "abcdef\n", "more\n"} {
		if n, err := w.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if d := j.Close(); d != 9 {
		t.Errorf("dropped %d, want 9", d)
	}
	if want := LogPrefix + "12345678\n" + LogPrefix + "abc\n"; out.String() != want {
		t.Errorf("log = %q, want %q", out.String(), want)
	}
}
