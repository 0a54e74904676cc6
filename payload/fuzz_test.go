package payload

import (
	"bytes"
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// Fuzz targets for everything kbgen reads from a submission. Each runs its
// seeds (f.Add plus testdata/fuzz/<Target>/) as an ordinary test; run one
// for real with scripts/fuzz.sh.

func seedConfig(f *testing.F) []byte {
	f.Helper()
	js, err := os.ReadFile("testdata/vectoradd.json")
	if err != nil {
		f.Fatal(err)
	}
	return js
}

// checkJobError: every refusal is a one-line *Error (exit 65 in the CLI),
// never another kind of error and never a panic.
func checkJobError(t *testing.T, err error) {
	t.Helper()
	if !IsJobError(err) {
		t.Fatalf("refusal is not a job error: %T %v", err, err)
	}
	// One line is the contract: the CLI and the job log print it as it is.
	if strings.ContainsAny(err.Error(), "\n\r") {
		t.Fatalf("error spans lines: %q", err)
	}
}

// checkAccepted: an accepted config is valid, and survives encoding and
// decoding again unchanged, so the bootstrap and the runner see one job.
func checkAccepted(t *testing.T, c *Config) {
	t.Helper()
	if err := c.Validate(); err != nil {
		t.Fatalf("accepted config does not validate: %v", err)
	}
	enc, err := EncodeConfig(c)
	if err != nil {
		t.Fatalf("accepted config does not encode: %v", err)
	}
	back, err := Decode(enc)
	if err != nil {
		t.Fatalf("re-encoded config does not decode: %v", err)
	}
	if a, b, same := sameJob(c, back); !same {
		t.Fatalf("config changed on a round trip:\n%s\n%s", a, b)
	}
	for _, cs := range [][]Case{c.Tests, c.Benchmarks} {
		for _, tc := range cs {
			checkOneLine(t, tc)
		}
	}
}

// sameJob decides when two configs are "the same job": their JSON texts
// denote the same value. Strings compare after unescaping (a raw DEL byte
// and "\u007f" are one string: Go's encoder writes the first, Python's
// json.dumps, and so every re-encoded payload, the second; found by
// FuzzValidate/2f2ec0a20187dcc0 in keys kbgen passes through untouched),
// numbers compare by their text (Kernelbot's harness sees the digits kbgen
// wrote, so 1 and 1.0 are different jobs), object key order is ignored
// (both sides look keys up by name). It returns both texts for the failure
// message.
func sameJob(x, y *Config) (a, b []byte, same bool) {
	a, errA := json.Marshal(x)
	b, errB := json.Marshal(y)
	if errA != nil || errB != nil {
		return a, b, false
	}
	return a, b, reflect.DeepEqual(jsonValue(a), jsonValue(b))
}

// jsonValue decodes JSON text keeping each number's text.
func jsonValue(js []byte) any {
	dec := json.NewDecoder(bytes.NewReader(js))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return err.Error()
	}
	return v
}

func FuzzDecode(f *testing.F) {
	js := seedConfig(f)
	enc, err := Encode(js)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(enc)
	f.Add(enc[:len(enc)/2])
	f.Add("")
	f.Add("eJzLSM3JyVcozy/KSQEAGgQEXQ==") // zlib("hello world")
	f.Add("eJyLjgUAARUAuQ==")             // zlib("[]")
	f.Fuzz(func(t *testing.T, s string) {
		c, err := Decode(s)
		if err != nil {
			checkJobError(t, err)
			return
		}
		checkAccepted(t, c)
	})
}

func FuzzParseInput(f *testing.F) {
	js := seedConfig(f)
	enc, _ := Encode(js)
	f.Add(js)
	f.Add([]byte(enc))
	f.Add([]byte("  \n" + enc + "\n"))
	f.Add([]byte(`{"lang":"py","mode":"test","sources":{"a.py":""},"main":"a.py","tests":[{"n":1}]}`))
	f.Add([]byte(`{"lang":"py"} {"lang":"cu"}`))
	f.Add([]byte(`{"sources":{"a":"x"},"sources":{"b":"y"}}`))
	f.Add([]byte(strings.Repeat("[", MaxJSONDepth+1)))
	f.Fuzz(func(t *testing.T, data []byte) {
		in, err := ParseInput(data)
		if err != nil {
			checkJobError(t, err)
			return
		}
		checkAccepted(t, in.Config)
		// Both forms describe the same job.
		c, err := Decode(in.Encoded)
		if err != nil {
			t.Fatalf("Encoded form of an accepted input does not decode: %v", err)
		}
		if a, b, same := sameJob(in.Config, c); !same {
			t.Fatalf("Config and Encoded disagree:\n%s\n%s", a, b)
		}
	})
}

// FuzzValidate feeds arbitrary JSON to the parser and validator. Beyond
// checkAccepted: no accepted file name escapes the work dir.
func FuzzValidate(f *testing.F) {
	f.Add(seedConfig(f))
	f.Add([]byte(`{"lang":"cu","mode":"benchmark","sources":{"k.cu":""},"benchmarks":[{"n":1}],"defines":{"X":1},"compile_flags":["-O3"],"libraries":["cublas"]}`))
	f.Add([]byte(`{"lang":"py","mode":"test","sources":{"../x.py":""},"main":"../x.py","tests":[{"n":1}]}`))
	f.Add([]byte(`{"lang":"py","mode":"test","sources":{"a.py":""},"main":"a.py","tests":[{"n":"1\r2"}]}`))
	f.Add([]byte(`{"lang":"py","mode":"test","sources":{"a.py":""},"main":"a.py","tests":[{"n":"1\u20282"}]}`))
	f.Add([]byte(`{"lang":"py","mode":"private","seed":-1,"sources":{"a.py":""},"main":"a.py","tests":[{"n":1}],"benchmarks":[{"n":2}],"ranked_timeout":86400}`))
	f.Fuzz(func(t *testing.T, js []byte) {
		c, err := ParseJSON(js)
		if err != nil {
			checkJobError(t, err)
			return
		}
		checkAccepted(t, c)
		for _, files := range []map[string]string{c.Sources, c.Headers} {
			for name := range files {
				if strings.HasPrefix(name, "/") || name == ".." || strings.HasPrefix(name, "../") || strings.Contains(name, "/../") || strings.HasSuffix(name, "/..") || strings.ContainsRune(name, 0) {
					t.Fatalf("accepted file name %q escapes the work dir", name)
				}
			}
		}
	})
}

// FuzzCaseLine: whatever key and value a case holds, either Validate
// refuses it or its cases-file line is exactly one line to Kernelbot's
// harness (Python's str.splitlines) and splits back into the same fields.
func FuzzCaseLine(f *testing.F) {
	for _, s := range [][2]string{
		{"size", "128"}, {"name", "big"}, {"a", "1; b: 2"}, {"a", "1\nseed: 42"},
		{"a", "1\rseed: 42"}, {"a", "1\u2028seed: 42"}, {"a", "1\x85x: 2"}, {"k:x", "1"},
		{"k", "x: y"}, {"", ""}, {"k", "\xff"},
	} {
		f.Add(s[0], s[1], true)
	}
	f.Add("seed", "5236", false)
	f.Add("x", "1e999", false)
	f.Fuzz(func(t *testing.T, key, value string, isString bool) {
		v := StringScalar(value)
		if !isString {
			// A raw JSON value, as a number or literal would arrive.
			if err := json.Unmarshal([]byte(value), &v); err != nil || !json.Valid([]byte(value)) {
				return
			}
		}
		c := &Config{Lang: LangPython, Mode: ModeTest, Sources: map[string]string{"e.py": ""}, Main: "e.py",
			Tests: []Case{{{Key: key, Value: v}, {Key: "seed", Value: IntScalar(1)}}}}
		if err := c.Validate(); err != nil {
			checkJobError(t, err)
			return
		}
		checkOneLine(t, c.Tests[0])
	})
}

// checkOneLine asserts the cases-file line of tc is one line to Python and
// splits into tc's fields the way Kernelbot's harness splits it.
func checkOneLine(t *testing.T, tc Case) {
	t.Helper()
	line := tc.Line()
	if n := len(pySplitLines(line)); n > 1 {
		t.Fatalf("case %q is %d lines to Python's splitlines", line, n)
	}
	parts := strings.Split(line, ";")
	if len(parts) != len(tc) {
		t.Fatalf("case %q splits into %d parts, want %d", line, len(parts), len(tc))
	}
	for i, part := range parts {
		k, _, ok := strings.Cut(part, ":")
		if !ok || strings.TrimSpace(k) != strings.TrimSpace(tc[i].Key) {
			t.Fatalf("part %q of %q does not start with key %q", part, line, tc[i].Key)
		}
	}
}

// pyLineBreaks is written out here, not taken from the package, so the
// test checks Validate against Python's documented list
// (https://docs.python.org/3/library/stdtypes.html#str.splitlines).
var pyLineBreaks = []rune{'\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029}

// pySplitLines is Python's str.splitlines() (without keepends).
func pySplitLines(s string) []string {
	var lines []string
	start := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			// Python would not decode this file at all; count the byte as text.
			i++
			continue
		}
		if slices.Contains(pyLineBreaks, r) {
			lines = append(lines, s[start:i])
			if r == '\r' && strings.HasPrefix(s[i+size:], "\n") {
				size++
			}
			start = i + size
		}
		i += size
	}
	if start < len(s) {
		lines = append(lines, s[start:])
	}
	return lines
}
