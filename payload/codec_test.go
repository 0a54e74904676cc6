package payload

import (
	"bytes"
	"compress/zlib"
	"encoding/base64"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	zlibOf := func(s string) string {
		var b bytes.Buffer
		w := zlib.NewWriter(&b)
		w.Write([]byte(s))
		w.Close()
		return base64.StdEncoding.EncodeToString(b.Bytes())
	}
	tests := []struct {
		name    string
		encoded string
		kind    ErrorKind
	}{
		{"empty", "  ", KindNoPayload},
		{"not base64", "%%%not base64%%%", KindNotBase64},
		{"not zlib", base64.StdEncoding.EncodeToString([]byte("plain text")), KindNotZlib},
		{"truncated zlib", zlibOf(`{"lang": "py"}`)[:12], KindNotZlib},
		{"not json", zlibOf("lang=py"), KindNotJSON},
		{"json array", zlibOf("[1,2]"), KindNotJSON},
		{"too deep", zlibOf(strings.Repeat("[", 100) + strings.Repeat("]", 100)), KindTooDeep},
		{"wrong type", zlibOf(`{"lang": "py", "mode": "test", "sources": ["a"]}`), KindInvalidField},
		{"missing lang", zlibOf(`{"mode": "test", "sources": {"a.py": ""}}`), KindMissingField},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := Decode(tt.encoded)
			var je *Error
			if !errors.As(err, &je) || je.Kind != tt.kind {
				t.Fatalf("want kind %s, got %v", tt.kind, err)
			}
		})
	}
}

func TestZipBombStopped(t *testing.T) {
	t.Parallel()
	var b bytes.Buffer
	w, _ := zlib.NewWriterLevel(&b, zlib.BestCompression)
	zeros := make([]byte, 1<<20)
	for i := 0; i < (MaxInflatedBytes>>20)+4; i++ {
		w.Write(zeros)
	}
	w.Close()
	enc := base64.StdEncoding.EncodeToString(b.Bytes())
	if len(enc) > 100<<10 {
		t.Fatalf("bomb is not tiny: %d bytes", len(enc))
	}
	_, err := Decode(enc)
	var je *Error
	if !errors.As(err, &je) || je.Kind != KindTooLarge {
		t.Fatalf("want too-large, got %v", err)
	}
}

func TestParseInputTellsFormsApart(t *testing.T) {
	t.Parallel()
	js, _ := os.ReadFile("testdata/vectoradd.json")
	fromJSON, err := ParseInput(js)
	if err != nil {
		t.Fatal(err)
	}
	fromPayload, err := ParseInput([]byte("\n" + fromJSON.Encoded + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	if fromPayload.Encoded != fromJSON.Encoded || fromPayload.Config.Main != "eval.py" {
		t.Fatalf("forms disagree")
	}
}

func TestPythonJSON(t *testing.T) {
	t.Parallel()
	got, err := PythonJSON([]byte(`{"b":1,"a":[true,null,"é☃𝄞\u0001\"\\"],"c":{}}`))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"b": 1, "a": [true, null, "\u00e9\u2603\ud834\udd1e\u0001\"\\"], "c": {}}`
	if string(got) != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestKernelbotPythonInterop proves the contract both ways with the real
// Python: what kbgen encodes decodes in Kernelbot's code path to the same
// json.dumps text, and what Python encodes decodes here.
func TestKernelbotPythonInterop(t *testing.T) {
	t.Parallel()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not on PATH: Python interop not checked")
	}
	js, _ := os.ReadFile("testdata/vectoradd.json")
	enc, err := Encode(js)
	if err != nil {
		t.Fatal(err)
	}
	script := `
import base64, json, sys, zlib
raw = zlib.decompress(base64.b64decode(sys.stdin.read())).decode("utf-8")
cfg = json.loads(raw)
assert json.dumps(cfg) == raw, "not json.dumps text"
sys.stdout.write(base64.b64encode(zlib.compress(json.dumps(cfg).encode("utf-8"))).decode("utf-8"))
`
	cmd := exec.Command(py, "-c", script)
	cmd.Stdin = strings.NewReader(enc)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python could not decode kbgen's payload: %v", err)
	}
	goText, _ := Inflate(enc)
	pyText, err := Inflate(string(out))
	if err != nil {
		t.Fatalf("kbgen could not decode python's payload: %v", err)
	}
	if !bytes.Equal(goText, pyText) {
		t.Errorf("json text differs:\ngo %s\npy %s", goText, pyText)
	}
	if _, err := Decode(string(out)); err != nil {
		t.Errorf("python payload invalid: %v", err)
	}
}

func TestParseJSONRejectsTrailingData(t *testing.T) {
	t.Parallel()
	_, err := ParseJSON([]byte(`{"lang": "py"} {"lang": "cu"}`))
	var je *Error
	if !errors.As(err, &je) || je.Kind != KindNotJSON {
		t.Fatalf("want not-json for trailing data, got %v", err)
	}
}

func TestParseJSONRejectsInvalidUTF8(t *testing.T) {
	t.Parallel()
	_, err := ParseJSON([]byte("{\"lang\": \"py\", \"x\": \"\xff\"}"))
	var je *Error
	// The message is the contract: it tells the submitter the text is not UTF-8.
	if !errors.As(err, &je) || je.Kind != KindNotJSON || !strings.Contains(err.Error(), "UTF-8") {
		t.Fatalf("want not-json (UTF-8), got %v", err)
	}
}
