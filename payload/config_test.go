package payload

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"
)

func validPy() *Config {
	return &Config{
		Lang: LangPython, Mode: ModeTest, Main: "eval.py",
		Sources: map[string]string{"eval.py": "", "submission.py": ""},
		Tests:   []Case{{{Key: "size", Value: IntScalar(4)}}},
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		mutate func(c *Config)
		kind   ErrorKind
		field  string
	}{
		{"valid", func(c *Config) {}, "", ""},
		{"missing lang", func(c *Config) { c.Lang = "" }, KindMissingField, "lang"},
		{"unknown lang", func(c *Config) { c.Lang = "rs" }, KindInvalidField, "lang"},
		{"missing mode", func(c *Config) { c.Mode = "" }, KindMissingField, "mode"},
		{"unknown mode", func(c *Config) { c.Mode = "fast" }, KindInvalidField, "mode"},
		{"empty sources", func(c *Config) { c.Sources = nil }, KindEmptySources, "sources"},
		{"absolute path", func(c *Config) { c.Sources["/etc/passwd"] = "" }, KindUnsafePath, "sources"},
		{"dotdot path", func(c *Config) { c.Sources["a/../../x"] = "" }, KindUnsafePath, "sources"},
		{"header escapes", func(c *Config) { c.Headers = map[string]string{"../h.cuh": ""} }, KindUnsafePath, "headers"},
		{"missing main", func(c *Config) { c.Main = "" }, KindMissingField, "main"},
		{"main not a source", func(c *Config) { c.Main = "other.py" }, KindInvalidField, "main"},
		{"bad ranking", func(c *Config) { c.RankingBy = "best" }, KindInvalidField, "ranking_by"},
		{"negative timeout", func(c *Config) { c.TestTimeout = -1 }, KindInvalidField, "test_timeout"},
		{"no tests", func(c *Config) { c.Tests = nil }, KindMissingField, "tests"},
		{"benchmark without benchmarks", func(c *Config) { c.Mode = ModeBenchmark }, KindMissingField, "benchmarks"},
		{"case breaks format", func(c *Config) { c.Tests = []Case{{{Key: "a", Value: StringScalar("1; b: 2")}}} }, KindInvalidField, "tests"},
		{"bad define", func(c *Config) { c.Defines = map[string]Scalar{"A B": {}} }, KindInvalidField, "defines"},
		{"flag without dash", func(c *Config) { c.CompileFlags = []string{"O3"} }, KindInvalidField, "compile_flags"},
		{"cu needs no main", func(c *Config) { c.Lang = LangCUDA; c.Main = "" }, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := validPy()
			tt.mutate(c)
			err := c.Validate()
			if tt.kind == "" {
				if err != nil {
					t.Fatalf("want valid, got %v", err)
				}
				return
			}
			var je *Error
			if !errors.As(err, &je) {
				t.Fatalf("want *Error of kind %s, got %v", tt.kind, err)
			}
			if je.Kind != tt.kind || je.Field != tt.field {
				t.Fatalf("got kind %s field %q (%v), want %s %q", je.Kind, je.Field, err, tt.kind, tt.field)
			}
			// One line is the contract: the CLI and the job log print it as it is.
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error spans lines: %q", err)
			}
		})
	}
}

func TestModeTimeoutsAndRuns(t *testing.T) {
	t.Parallel()
	c := validPy()
	c.TestTimeout, c.RankedTimeout = 10, 30
	if got := c.ModeTimeout(ModeTest); got != 10*time.Second {
		t.Errorf("test timeout %v", got)
	}
	if got := c.ModeTimeout(ModeBenchmark); got != DefaultTimeout {
		t.Errorf("benchmark timeout default %v", got)
	}
	if got := c.ModeTimeout(ModeLeaderboard); got != 30*time.Second {
		t.Errorf("ranked timeout %v", got)
	}
	c.Mode = ModePrivate
	if got := c.RunModes(); len(got) != 3 || got[2] != ModeLeaderboard {
		t.Errorf("private runs %v", got)
	}
	if c.Ranking() != RankingLast {
		t.Errorf("default ranking %s", c.Ranking())
	}
}

func TestUnknownKeysRoundTrip(t *testing.T) {
	t.Parallel()
	js, err := os.ReadFile("testdata/vectoradd.json")
	if err != nil {
		t.Fatal(err)
	}
	c, err := ParseJSON(js)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(c.Extra["future_key"]); got != `{"kept": [1, 2.5, true]}` {
		t.Fatalf("extra key not kept: %q", got)
	}
	out, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	back, err := ParseJSON(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.Tests[1].Line() != "size: 4096; seed: 1; name: big" {
		t.Errorf("case order lost: %q", back.Tests[1].Line())
	}
	var a, b any
	_ = json.Unmarshal(back.Extra["future_key"], &a)
	_ = json.Unmarshal(c.Extra["future_key"], &b)
	if !jsonEqual(a, b) {
		t.Errorf("extra changed: %v vs %v", a, b)
	}
}

func TestCaseLinePythonStr(t *testing.T) {
	t.Parallel()
	var c Case
	if err := json.Unmarshal([]byte(`{"n": 3, "s": "x y", "b": true, "f": false, "z": null, "r": 1.5}`), &c); err != nil {
		t.Fatal(err)
	}
	if got, want := c.Line(), "n: 3; s: x y; b: True; f: False; z: None; r: 1.5"; got != want {
		t.Errorf("got %q want %q", got, want)
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func TestScalarStringsHaveOneSpelling(t *testing.T) {
	t.Parallel()
	var a, b Scalar
	if err := json.Unmarshal([]byte(`"\u001A\u00e9"`), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(`"\u001a`+"\u00e9"+`"`), &b); err != nil {
		t.Fatal(err)
	}
	x, _ := a.MarshalJSON()
	y, _ := b.MarshalJSON()
	if string(x) != string(y) || a.String() != "\x1a\u00e9" {
		t.Errorf("same text, different spellings: %s vs %s", x, y)
	}
}
