package syncbuf

import (
	"strings"
	"sync"
	"testing"
)

// Run with -race: concurrent writers and a reader must not race, and no
// write is lost.
func TestConcurrentWritesAndReads(t *testing.T) {
	t.Parallel()
	var b Buffer
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 100; j++ {
				b.Write([]byte("x"))
				_ = b.String()
			}
		}()
	}
	wg.Wait()
	if got := b.String(); got != strings.Repeat("x", 800) {
		t.Fatalf("got %d bytes, want 800", len(got))
	}
}

func TestMax(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		max    int
		writes []string
		want   string
	}{
		{"unbounded", 0, []string{"abc", "def"}, "abcdef"},
		{"under", 10, []string{"abc", "def"}, "abcdef"},
		{"cut within a write", 4, []string{"abc", "def"}, "abcd"},
		{"full before a write", 3, []string{"abc", "def"}, "abc"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := Buffer{Max: tc.max}
			for _, w := range tc.writes {
				// Every write takes all of p, kept or not.
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if got := string(b.Bytes()); got != tc.want {
				t.Errorf("holds %q, want %q", got, tc.want)
			}
		})
	}
}
