// Package syncbuf is a bytes.Buffer that one goroutine may read while
// others write it: a child process's output read before the child is done
// (the runner's verdict pipe, kbgen-nvml's stderr), and in tests a logger
// polled while it writes.
package syncbuf

import (
	"bytes"
	"sync"
)

// Buffer is safe for concurrent Write, String and Bytes. The zero value
// is ready and unbounded.
type Buffer struct {
	// Max, when positive, keeps only the first Max bytes: a Write still
	// takes all of p, so a child writing more is never cut off by a short
	// write, and the rest is dropped.
	Max int
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.Max <= 0 {
		return b.buf.Write(p)
	}
	if room := b.Max - b.buf.Len(); room > 0 {
		b.buf.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Bytes is a copy of what the buffer holds.
func (b *Buffer) Bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}
