package payload

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// Lang is the submission language.
type Lang string

const (
	LangPython Lang = "py"
	LangCUDA   Lang = "cu"
)

// Mode is what the evaluation does.
type Mode string

const (
	ModeTest        Mode = "test"
	ModeBenchmark   Mode = "benchmark"
	ModeLeaderboard Mode = "leaderboard"
	ModeProfile     Mode = "profile"
	ModePrivate     Mode = "private"
)

// Modes lists every mode, in the order the docs present them.
var Modes = []Mode{ModeTest, ModeBenchmark, ModeLeaderboard, ModeProfile, ModePrivate}

// Ranked reports whether the mode produces a leaderboard score (and so runs
// test → benchmark → leaderboard with the ranked timeout).
func (m Mode) Ranked() bool { return m == ModeLeaderboard || m == ModePrivate }

// RankingBy is how benchmark timings are combined into a score.
type RankingBy string

const (
	RankingLast RankingBy = "last"
	RankingMean RankingBy = "mean"
	RankingGeom RankingBy = "geom"
)

// DefaultTimeout is Kernelbot's default for each of the three mode timeouts.
const DefaultTimeout = 180 * time.Second

// Config is a Kernelbot job. Field names and JSON keys are Kernelbot's; keys
// kbgen does not know are kept in Extra and written back unchanged.
type Config struct {
	Lang             Lang              `json:"lang"`
	Mode             Mode              `json:"mode"`
	Sources          map[string]string `json:"sources"`
	Headers          map[string]string `json:"headers,omitempty"`
	Main             string            `json:"main,omitempty"`
	Tests            []Case            `json:"tests,omitempty"`
	Benchmarks       []Case            `json:"benchmarks,omitempty"`
	Seed             *int64            `json:"seed,omitempty"`
	RankingBy        RankingBy         `json:"ranking_by,omitempty"`
	TestTimeout      int               `json:"test_timeout,omitempty"`
	BenchmarkTimeout int               `json:"benchmark_timeout,omitempty"`
	RankedTimeout    int               `json:"ranked_timeout,omitempty"`
	Arch             Scalar            `json:"arch,omitzero"`
	Defines          map[string]Scalar `json:"defines,omitempty"`
	IncludeDirs      []string          `json:"include_dirs,omitempty"`
	Libraries        []string          `json:"libraries,omitempty"`
	CompileFlags     []string          `json:"compile_flags,omitempty"`
	MultiGPU         bool              `json:"multi_gpu,omitempty"`

	// Extra holds keys kbgen does not interpret, passed through untouched.
	Extra map[string]json.RawMessage `json:"-"`
}

// fieldIndex maps each JSON key Config interprets to its struct field;
// anything else is Extra.
var fieldIndex = func() map[string]int {
	m := map[string]int{}
	t := reflectConfigType()
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name != "" && name != "-" {
			m[name] = i
		}
	}
	return m
}()

type configFields Config

// UnmarshalJSON decodes a config in one pass over the object, keeping
// unknown keys in Extra. (Decoding into a map and then into the struct
// would scan the sources, nearly all of a payload's bytes, twice more.)
func (c *Config) UnmarshalJSON(b []byte) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	if d, ok := tok.(json.Delim); !ok || d != '{' {
		return &json.UnmarshalTypeError{Value: "non-object", Type: reflectConfigType()}
	}
	var f configFields
	fields := reflect.ValueOf(&f).Elem()
	for dec.More() {
		kt, err := dec.Token()
		if err != nil {
			return err
		}
		key := kt.(string)
		i, known := fieldIndex[key]
		if !known {
			var raw json.RawMessage
			if err := dec.Decode(&raw); err != nil {
				return err
			}
			if f.Extra == nil {
				f.Extra = map[string]json.RawMessage{}
			}
			f.Extra[key] = raw
			continue
		}
		// A repeated key replaces the earlier value, as in Python's json:
		// decoding into a map filled by the first one would merge them, and
		// kbgen would run files Kernelbot never saw.
		fields.Field(i).SetZero()
		if err := dec.Decode(fields.Field(i).Addr().Interface()); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				te.Field = key
			}
			return err
		}
	}
	if _, err := dec.Token(); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	*c = Config(f)
	return nil
}

// MarshalJSON encodes the config with Extra keys after the known ones, in
// sorted order so the output is stable.
func (c Config) MarshalJSON() ([]byte, error) {
	b, err := json.Marshal(configFields(c))
	if err != nil {
		return nil, err
	}
	if len(c.Extra) == 0 {
		return b, nil
	}
	keys := make([]string, 0, len(c.Extra))
	for k := range c.Extra {
		if _, known := fieldIndex[k]; !known {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	buf := bytes.NewBuffer(b[:len(b)-1])
	for _, k := range keys {
		if buf.Len() > 1 {
			buf.WriteByte(',')
		}
		kb, _ := json.Marshal(k)
		buf.Write(kb)
		buf.WriteByte(':')
		buf.Write(c.Extra[k])
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// ModeTimeout is the timeout for one evaluation run of the given mode
// (test, benchmark, leaderboard, profile), as Kernelbot picks it.
func (c *Config) ModeTimeout(run Mode) time.Duration {
	secs := c.BenchmarkTimeout
	switch {
	case run == ModeTest:
		secs = c.TestTimeout
	case run.Ranked():
		secs = c.RankedTimeout
	}
	if secs <= 0 {
		return DefaultTimeout
	}
	return time.Duration(secs) * time.Second
}

// Ranking returns ranking_by with its default applied.
func (c *Config) Ranking() RankingBy {
	if c.RankingBy == "" {
		return RankingLast
	}
	return c.RankingBy
}

// RunModes lists the evaluation runs the job's mode implies, in order:
// leaderboard and private run test, then benchmark, then leaderboard, each
// gated on the previous one passing.
func (c *Config) RunModes() []Mode {
	if c.Mode.Ranked() {
		return []Mode{ModeTest, ModeBenchmark, ModeLeaderboard}
	}
	return []Mode{c.Mode}
}

// Validate checks the job against its contract
// (docs/architecture.md#contracts-and-where-each-one-lives; the fields:
// docs/formats.md#job-config-payload) and returns the first problem as an
// *Error.
func (c *Config) Validate() error {
	switch c.Lang {
	case "":
		return errorf(KindMissingField, "lang", `missing (want "py" or "cu")`)
	case LangPython, LangCUDA:
	default:
		return errorf(KindInvalidField, "lang", `unknown language %q (want "py" or "cu")`, c.Lang)
	}
	if c.Mode == "" {
		return errorf(KindMissingField, "mode", "missing (want one of %s)", ModeList())
	}
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return errorf(KindInvalidField, "mode", "%v", err)
	}
	if len(c.Sources) == 0 {
		return errorf(KindEmptySources, "sources", "no source files")
	}
	for _, group := range []struct {
		field string
		files map[string]string
	}{{"sources", c.Sources}, {"headers", c.Headers}} {
		for name := range group.files {
			if err := CheckFileName(name); err != nil {
				return &Error{Kind: KindUnsafePath, Field: group.field, Msg: err.Error()}
			}
		}
	}
	if c.Lang == LangPython {
		if c.Main == "" {
			return errorf(KindMissingField, "main", "missing: a py job names the script to run (e.g. eval.py)")
		}
		if _, ok := c.Sources[c.Main]; !ok {
			return errorf(KindInvalidField, "main", "%q is not one of the sources", c.Main)
		}
	}
	switch c.RankingBy {
	case "", RankingLast, RankingMean, RankingGeom:
	default:
		return errorf(KindInvalidField, "ranking_by", "unknown value %q (want last, mean or geom)", c.RankingBy)
	}
	for _, t := range []struct {
		field string
		secs  int
	}{{"test_timeout", c.TestTimeout}, {"benchmark_timeout", c.BenchmarkTimeout}, {"ranked_timeout", c.RankedTimeout}} {
		if t.secs < 0 || t.secs > MaxTimeoutSeconds {
			return errorf(KindInvalidField, t.field, "%d seconds is out of range (0 to %d)", t.secs, MaxTimeoutSeconds)
		}
	}
	needCases := c.Tests
	field := "tests"
	if c.Mode != ModeTest {
		needCases, field = c.Benchmarks, "benchmarks"
	}
	if len(needCases) == 0 {
		return errorf(KindMissingField, field, "mode %q needs at least one case", c.Mode)
	}
	if c.Mode.Ranked() && len(c.Tests) == 0 {
		return errorf(KindMissingField, "tests", "mode %q runs the tests first and needs at least one", c.Mode)
	}
	for _, list := range []struct {
		field string
		cases []Case
	}{{"tests", c.Tests}, {"benchmarks", c.Benchmarks}} {
		for _, tc := range list.cases {
			if len(tc) == 0 {
				// It would be an empty line: Kernelbot's harness rejects it
				// (exit 113) and "last benchmark" would silently pick another.
				return errorf(KindInvalidField, list.field, "empty case {}: a case needs at least one key")
			}
			for _, f := range tc {
				if strings.ContainsAny(f.Key, ":;"+pythonLineBreaks) || strings.ContainsAny(f.Value.String(), ";"+pythonLineBreaks) {
					return errorf(KindInvalidField, list.field, "case field %q would break the one-line `k: v; k: v` cases format", f.Key)
				}
			}
		}
	}
	for name := range c.Defines {
		if !isIdentifier(name) {
			return errorf(KindInvalidField, "defines", "%q is not a valid macro name", name)
		}
	}
	for _, fl := range c.CompileFlags {
		if !strings.HasPrefix(fl, "-") {
			return errorf(KindInvalidField, "compile_flags", "flag %q should start with a dash", fl)
		}
	}
	for _, d := range c.IncludeDirs {
		if strings.HasPrefix(d, "-") {
			return errorf(KindInvalidField, "include_dirs", "%q looks like a flag, not a directory", d)
		}
	}
	for _, l := range c.Libraries {
		if l == "" || strings.HasPrefix(l, "-") || strings.ContainsAny(l, "/ ") {
			return errorf(KindInvalidField, "libraries", "%q is not a library name", l)
		}
	}
	return nil
}

// pythonLineBreaks are the characters Python's str.splitlines() ends a line
// at; Kernelbot's harness reads the cases file with it, so any of them in a
// case would start a new case there.
const pythonLineBreaks = "\n\r\v\f\x1c\x1d\x1e\u0085\u2028\u2029"

// MaxTimeoutSeconds bounds each mode timeout (one day): a larger value is a
// mistake, and would hold a donated GPU hostage.
const MaxTimeoutSeconds = 24 * 60 * 60

// CheckFileName rejects names that would escape the work dir: absolute paths,
// `..` segments, empty names, NUL bytes and backslashes.
func CheckFileName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty file name")
	case strings.ContainsRune(name, 0):
		return fmt.Errorf("file name %q holds a NUL byte", name)
	case strings.HasPrefix(name, "/"):
		return fmt.Errorf("file name %q is absolute; it must stay inside the work dir", name)
	case strings.Contains(name, `\`):
		return fmt.Errorf("file name %q holds a backslash", name)
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == ".." {
			return fmt.Errorf("file name %q escapes the work dir", name)
		}
	}
	if clean := path.Clean(name); clean == "." {
		return fmt.Errorf("file name %q names the work dir itself", name)
	}
	return nil
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, r := range s {
		if r == '_' || (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (i > 0 && r >= '0' && r <= '9') {
			continue
		}
		return false
	}
	return true
}

// ModeList is every mode, comma-separated, for messages and --help.
func ModeList() string {
	s := make([]string, len(Modes))
	for i, m := range Modes {
		s[i] = string(m)
	}
	return strings.Join(s, ", ")
}

// Valid reports whether m is one of Modes (ParseMode says why not).
func (m Mode) Valid() bool {
	_, err := ParseMode(string(m))
	return err == nil
}

// ParseMode is the one reading of a mode name, for a job's config and for
// every --mode flag alike: s must be one of Modes, exactly.
func ParseMode(s string) (Mode, error) {
	if !slices.Contains(Modes, Mode(s)) {
		return "", &ModeError{Mode: s}
	}
	return Mode(s), nil
}

// ModeError is a mode name that is not one of Modes ("" when none was
// given).
type ModeError struct{ Mode string }

func (e *ModeError) Error() string {
	if e.Mode == "" {
		return fmt.Sprintf("no mode (want one of %s)", ModeList())
	}
	return fmt.Sprintf("unknown mode %q (want one of %s)", e.Mode, ModeList())
}
