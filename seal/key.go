package seal

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"strings"
)

// KeySize is the HMAC-SHA256 key's length in bytes.
const KeySize = 32

// Key is one job's secret: made by the sandbox, known only to it and to
// the runner's memory.
type Key [KeySize]byte

// NewKey makes a random key.
func NewKey() (Key, error) {
	var k Key
	if _, err := rand.Read(k[:]); err != nil {
		return Key{}, fmt.Errorf("making the result key: %w", err)
	}
	return k, nil
}

// Text is the key as it travels on the container's stdin: hex and a
// newline.
func (k Key) Text() string { return hex.EncodeToString(k[:]) + "\n" }

// ReadKey reads a key written as Text from r, to its end: nothing else
// may follow, and nothing is left for a later reader of the same pipe.
func ReadKey(r io.Reader) (Key, error) {
	b, err := io.ReadAll(io.LimitReader(r, 2*KeySize+2))
	if err != nil {
		return Key{}, fmt.Errorf("reading the result key from stdin: %w", err)
	}
	raw, err := hex.DecodeString(strings.TrimSuffix(string(b), "\n"))
	if err != nil || len(raw) != KeySize {
		return Key{}, fmt.Errorf("reading the result key from stdin: want %d hex digits and a newline, got %d bytes", 2*KeySize, len(b))
	}
	var k Key
	copy(k[:], raw)
	return k, nil
}
