package seal

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Magic starts an envelope's header line:
//
//	kbgen-sealed-result v1 <result bytes> <noise bytes> <hmac hex>\n<result><noise>
//
// noise bytes is 0 when the runner recorded no noise.json.
const Magic = "kbgen-sealed-result v1 "

// MaxBytes bounds the container's stdout the sandbox keeps: result.json
// (kbgen submit reads at most client.MaxResultBytes, 64 MiB) plus
// noise.json and slack. More than that is the submission flooding it.
const MaxBytes = 80 << 20

// Contents are the files an envelope carries, byte for byte.
type Contents struct {
	// Result is result.json; never empty in a sealed envelope.
	Result []byte
	// Noise is noise.json; nil when the runner recorded none.
	Noise []byte
}

// Write writes c's envelope to w in one call.
func Write(w io.Writer, k Key, c Contents) error {
	if len(c.Result) == 0 {
		return errors.New("sealing: no result")
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "\n%s%d %d %s\n", Magic, len(c.Result), len(c.Noise), hex.EncodeToString(mac(k, c)))
	b.Write(c.Result)
	b.Write(c.Noise)
	if _, err := w.Write(b.Bytes()); err != nil {
		return fmt.Errorf("writing the sealed result: %w", err)
	}
	return nil
}

// mac covers both files with their lengths, so no byte can move from one
// to the other.
func mac(k Key, c Contents) []byte {
	h := hmac.New(sha256.New, k[:])
	h.Write([]byte(Magic))
	var n [8]byte
	for _, part := range [][]byte{c.Result, c.Noise} {
		binary.BigEndian.PutUint64(n[:], uint64(len(part)))
		h.Write(n[:])
		h.Write(part)
	}
	return h.Sum(nil)
}

// ErrNoEnvelope is Open's answer when no frame in the stream verifies.
var ErrNoEnvelope = errors.New("no result sealed by kbgen run")

// Open finds the first envelope in stream (the container's stdout) that
// verifies with k. Frames that do not verify (forged, edited, cut off)
// are skipped; when none does, the error is ErrNoEnvelope with what was
// seen.
func Open(stream []byte, k Key) (Contents, error) {
	seen := 0
	for rest := stream; ; {
		i := bytes.Index(rest, []byte(Magic))
		if i < 0 {
			break
		}
		seen++
		rest = rest[i+len(Magic):]
		if c, ok := frame(rest, k); ok {
			return c, nil
		}
	}
	if seen == 0 {
		return Contents{}, fmt.Errorf("%w: none in %d bytes of the container's stdout", ErrNoEnvelope, len(stream))
	}
	return Contents{}, fmt.Errorf("%w: %d frame(s) in the container's stdout, none verifies", ErrNoEnvelope, seen)
}

// frame parses and verifies one frame after its Magic.
func frame(b []byte, k Key) (Contents, bool) {
	nl := bytes.IndexByte(b, '\n')
	if nl < 0 || nl > 128 {
		return Contents{}, false
	}
	f := strings.Split(string(b[:nl]), " ")
	if len(f) != 3 {
		return Contents{}, false
	}
	nr, err1 := strconv.Atoi(f[0])
	nn, err2 := strconv.Atoi(f[1])
	sum, err3 := hex.DecodeString(f[2])
	body := b[nl+1:]
	if err1 != nil || err2 != nil || err3 != nil || nr <= 0 || nn < 0 || nr > len(body) || nn > len(body)-nr {
		return Contents{}, false
	}
	c := Contents{Result: body[:nr:nr]}
	if nn > 0 {
		c.Noise = body[nr : nr+nn : nr+nn]
	}
	return c, hmac.Equal(sum, mac(k, c))
}
