package sandbox

import (
	"fmt"
	"io"
	"sync"
	"unicode/utf8"
)

// MaxLogBytes is how much of the container's output (stdout and stderr
// together, as the container wrote it) reaches the job log; the rest is
// counted and dropped. The runner's own lines are a few KiB: the
// submission's output goes into result.json, cut there (runner/output.go).
const MaxLogBytes = 4 << 20

// LogPrefix starts every line that came out of the container, so none can
// start with one of Buildkite's group markers (`---`, `+++`, `~~~`,
// `^^^ +++`: buildkite/docs pages/pipelines/configure/managing_log_output.md)
// or pass for one of kbgen sandbox's own lines, which have no prefix.
const LogPrefix = "┃ "

// JobLog makes the container's output inert before it reaches the job
// log (the agent's pty, which Buildkite renders with terminal-to-html):
// bounded (MaxLogBytes, then a count of what was dropped), every line
// prefixed with LogPrefix, and every control character but tab and
// newline shown as an escape instead of acting (ANSI CSI and OSC
// sequences, OSC 1339 links, the agent's APC timestamps, a bare \r that
// would rewrite a line, C1 controls, bidi overrides, invalid UTF-8). The
// container's streams reach it through pipes the sandbox reads, so
// whatever reaches them passes through here. (A submission under `kbgen
// run --sealed` cannot reach them at all: the runner, PID 1 and not
// dumpable, holds them; for any other command tini is PID 1 and
// /proc/1/fd/1 is open to the command's uid.)
type JobLog struct {
	mu      sync.Mutex
	max     int64
	kept    int64
	dropped int64
	// open is the stream whose last line is not finished yet; nil when
	// the log is at the start of a line.
	open    *logStream
	streams []*logStream
}

// NewJobLog bounds the log at max bytes of container output.
func NewJobLog(max int64) *JobLog { return &JobLog{max: max} }

type logStream struct {
	j       *JobLog
	w       io.Writer
	pending []byte // an incomplete UTF-8 sequence at the end of a write
	cr      bool   // the last character was \r (a \n after it is the same line end)
}

// Stream is a writer for one of the container's streams, written to w.
func (j *JobLog) Stream(w io.Writer) io.Writer {
	s := &logStream{j: j, w: w}
	j.mu.Lock()
	j.streams = append(j.streams, s)
	j.mu.Unlock()
	return s
}

// Write never fails: the docker client must be drained whatever the
// destination does, or the container would block on its output.
func (s *logStream) Write(p []byte) (int, error) {
	n := len(p)
	j := s.j
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.kept >= j.max {
		j.dropped += int64(n)
		return n, nil
	}
	if j.open != nil && j.open != s {
		// Another stream left a line open: end it, or this stream's
		// text would start a line with no prefix after its next newline.
		_, _ = io.WriteString(j.open.w, "\n")
		j.open.cr = false
		j.open = nil
	}
	out, used := s.render(p, j.max-j.kept)
	j.kept += int64(len(out))
	j.dropped += int64(n - used)
	if used < n {
		j.kept = j.max // full: a later, shorter write must not squeeze in
	}
	_, _ = s.w.Write(out)
	return n, nil
}

// render escapes p, prefixing each line, into at most budget bytes, and
// says how many bytes of p that took (an incomplete UTF-8 sequence at the
// end is kept for the next write and counts as taken).
func (s *logStream) render(p []byte, budget int64) (out []byte, used int) {
	j := s.j
	out = make([]byte, 0, min(int64(len(p)+len(p)/8+len(LogPrefix)), budget))
	var piece []byte
	if len(s.pending) > 0 {
		p = append(s.pending, p...)
		used = -len(s.pending)
		s.pending = nil
	}
	for len(p) > 0 {
		piece = piece[:0]
		open := j.open
		if open == nil {
			piece = append(piece, LogPrefix...)
			open = s
		}
		r, size := utf8.DecodeRune(p)
		switch {
		case r == utf8.RuneError && size <= 1 && !utf8.FullRune(p):
			s.pending = append([]byte(nil), p...)
			return out, used + len(p)
		case r == utf8.RuneError && size <= 1:
			piece = fmt.Appendf(piece, `\x%02x`, p[0])
		case r == '\n' && s.cr:
			// \r\n: the \r already ended the line.
			piece, open = piece[:0], j.open
		case r == '\n', r == '\r':
			piece, open = append(piece, '\n'), nil
		case r == '\t', inert(r):
			piece = utf8.AppendRune(piece, r)
		default:
			piece = escapeRune(piece, r)
		}
		if int64(len(out)+len(piece)) > budget {
			return out, max(used, 0)
		}
		out = append(out, piece...)
		j.open = open
		s.cr = r == '\r'
		p, used = p[size:], used+size
	}
	return out, max(used, 0)
}

// inert reports whether r prints as itself: not a C0 or C1 control, DEL,
// or a bidi control that would reorder what follows it on screen.
func inert(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return false
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f, r == 0x061c:
		return false
	}
	return true
}

func escapeRune(out []byte, r rune) []byte {
	if r < 0x100 {
		return fmt.Appendf(out, `\x%02x`, r)
	}
	return fmt.Appendf(out, `\u%04x`, r)
}

// Close ends any line left open (so the sandbox's own next line starts a
// line of its own) and reports how many bytes were dropped at the cap.
func (j *JobLog) Close() (dropped int64) {
	j.mu.Lock()
	defer j.mu.Unlock()
	for _, s := range j.streams {
		if len(s.pending) > 0 {
			if j.open != nil && j.open != s {
				_, _ = io.WriteString(j.open.w, "\n")
				j.open = nil
			}
			out := []byte(nil)
			if j.open == nil {
				out = append(out, LogPrefix...)
				j.open = s
			}
			for _, b := range s.pending {
				out = fmt.Appendf(out, `\x%02x`, b)
			}
			s.pending = nil
			_, _ = s.w.Write(out)
		}
	}
	if j.open != nil {
		_, _ = io.WriteString(j.open.w, "\n")
		j.open = nil
	}
	return j.dropped
}
