package client

import (
	"encoding/json"
	"fmt"
	"io"
	"sync"
)

// Progress formats.
const (
	ProgressText  = "text"
	ProgressJSON  = "json"
	ProgressQuiet = "quiet"
)

// Progress writes wait events for a person (one growing line:
// `scheduled 0.3s → running 2.1s → passed 41.0s`, the build URL first) or
// for a program (one JSON object per line).
type Progress struct {
	mu     sync.Mutex
	w      io.Writer
	format string
	inLine bool
}

// NewProgress returns a Progress writing to w in format (text, json or
// quiet).
func NewProgress(w io.Writer, format string) *Progress {
	return &Progress{w: w, format: format}
}

// Event records one event; use it as WaitOptions.OnEvent.
func (p *Progress) Event(e Event) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch p.format {
	case ProgressQuiet:
		// Errors only: the reason a run ended without a result.
		if e.Kind == "done" && e.Error != "" {
			fmt.Fprintf(p.w, "error: %s\n", e.Error)
		}
		return
	case ProgressJSON:
		b, _ := json.Marshal(e)
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	switch e.Kind {
	case "created":
		fmt.Fprintf(p.w, "build %d: %s\n", e.Build, e.URL)
	case "state", "job":
		word := e.State
		if e.Kind == "job" {
			word = e.Step + " " + e.State
		}
		if p.inLine {
			fmt.Fprint(p.w, " → ")
		}
		fmt.Fprintf(p.w, "%s %.1fs", word, e.Seconds)
		p.inLine = true
	case "budget":
		if p.inLine {
			fmt.Fprint(p.w, " → ")
		}
		fmt.Fprintf(p.w, "%s %.1fs", e.State, e.Seconds)
		p.inLine = true
	case "canceled":
		p.endLine()
		fmt.Fprintf(p.w, "build %d canceled\n", e.Build)
	case "done":
		p.endLine()
		if e.Error != "" {
			fmt.Fprintf(p.w, "error: %s\n", e.Error)
		}
	}
}

func (p *Progress) endLine() {
	if p.inLine {
		fmt.Fprintln(p.w)
		p.inLine = false
	}
}
