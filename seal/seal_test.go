package seal

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func mustKey(t *testing.T) Key {
	t.Helper()
	k, err := NewKey()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func envelope(t *testing.T, k Key, c Contents) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, k, c); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestOpen: only a frame made with the job's key, unchanged, opens;
// anything the submission can write around or instead of it does not.
func TestOpen(t *testing.T) {
	t.Parallel()
	k, other := mustKey(t), mustKey(t)
	genuine := Contents{Result: []byte(`{"success": false}`), Noise: []byte(`{"verdict": "clean"}`)}
	forged := Contents{Result: []byte(`{"success": true}`)}
	real := envelope(t, k, genuine)
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	tests := []struct {
		name   string
		stream []byte
		want   *Contents // nil: ErrNoEnvelope
	}{
		{"the runner's frame alone", real, &genuine},
		{"junk around it", cat([]byte("junk\x1b[31m"), real, []byte("more junk")), &genuine},
		{"a forged frame first", cat(envelope(t, other, forged), real), &genuine},
		{"a frame header forged by hand first", cat([]byte("\n"+Magic+"17 0 00\n"+`{"success": true}`), real), &genuine},
		{"result without noise", envelope(t, k, Contents{Result: []byte("{}")}), &Contents{Result: []byte("{}")}},
		{"nothing", nil, nil},
		{"a forged frame with another key", envelope(t, other, forged), nil},
		{"one result byte changed", bytes.Replace(real, []byte("false"), []byte("fals3"), 1), nil},
		{"cut off", real[:len(real)-1], nil},
		{"a byte moved from noise to result", bytes.Replace(real, []byte(" 18 20 "), []byte(" 19 19 "), 1), nil},
		{"header only", []byte(Magic + "\n"), nil},
		{"lengths past the end", []byte(Magic + "999999 0 00\n{}"), nil},
		{"negative noise length", []byte(Magic + "2 -1 00\n{}"), nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Open(tt.stream, k)
			if tt.want == nil {
				if !errors.Is(err, ErrNoEnvelope) {
					t.Fatalf("Open = %q, %q, %v; want ErrNoEnvelope", got.Result, got.Noise, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got.Result, tt.want.Result) || !bytes.Equal(got.Noise, tt.want.Noise) {
				t.Errorf("Open = %q, %q; want %q, %q", got.Result, got.Noise, tt.want.Result, tt.want.Noise)
			}
		})
	}
}

func TestKeyText(t *testing.T) {
	t.Parallel()
	k := mustKey(t)
	tests := []struct {
		name  string
		input string
		ok    bool
	}{
		{"as written", k.Text(), true},
		{"without the newline", strings.TrimSuffix(k.Text(), "\n"), true},
		{"empty stdin", "", false},
		{"short", k.Text()[:10], false},
		{"not hex", strings.Repeat("z", 2*KeySize) + "\n", false},
		{"more after it", k.Text() + "extra", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := ReadKey(strings.NewReader(tt.input))
			if tt.ok != (err == nil) || (tt.ok && got != k) {
				t.Errorf("ReadKey(%q) = %x, %v; want ok=%v", tt.input, got, err, tt.ok)
			}
		})
	}
}

func TestWriteRefusesEmptyResult(t *testing.T) {
	t.Parallel()
	if err := Write(&bytes.Buffer{}, mustKey(t), Contents{}); err == nil {
		t.Error("Write sealed an empty result")
	}
}
