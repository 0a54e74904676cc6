package client

import (
	"bytes"
	"testing"
)

func TestProgressText(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	p := NewProgress(&buf, ProgressText)
	code := 5
	no := false
	for _, e := range []Event{
		{Kind: "created", Build: 7, URL: "https://buildkite.com/o/p/builds/7"},
		{Kind: "state", State: "scheduled", Seconds: 0.3},
		{Kind: "budget", State: "waiting for API budget", Seconds: 0.5},
		{Kind: "state", State: "running", Seconds: 2.1},
		{Kind: "job", Step: "eval", State: "running", Seconds: 4},
		{Kind: "canceled", Build: 7},
		{Kind: "done", Build: 7, Success: &no, Exit: &code, Error: "timed out after 1m0s waiting for build 7 (state running); the build was canceled"},
	} {
		p.Event(e)
	}
	want := "build 7: https://buildkite.com/o/p/builds/7\n" +
		"scheduled 0.3s → waiting for API budget 0.5s → running 2.1s → eval running 4.0s\n" +
		"build 7 canceled\n" +
		"error: timed out after 1m0s waiting for build 7 (state running); the build was canceled\n"
	if buf.String() != want {
		t.Errorf("text progress:\n%s\nwant:\n%s", buf.String(), want)
	}

	buf.Reset()
	NewProgress(&buf, ProgressQuiet).Event(Event{Kind: "created", Build: 1})
	if buf.Len() != 0 {
		t.Errorf("quiet progress wrote %q", buf.String())
	}
	// -q is "errors only": a timeout (exit 5) still says why on stderr;
	// it once printed nothing at all.
	q := NewProgress(&buf, ProgressQuiet)
	q.Event(Event{Kind: "canceled", Build: 7})
	q.Event(Event{Kind: "done", Build: 7, Success: &no, Exit: &code, Error: "timed out after 1m0s"})
	if want := "error: timed out after 1m0s\n"; buf.String() != want {
		t.Errorf("quiet progress wrote %q, want %q", buf.String(), want)
	}
}
