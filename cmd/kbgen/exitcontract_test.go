package main

import (
	"go/ast"
	"go/constant"
	"go/parser"
	"go/token"
	"go/types"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// verdictOne are the commands whose exit 1 is a documented verdict, not
// the unexpected error: the checks, which say "no" with 1.
var verdictOne = []struct {
	re  *regexp.Regexp
	why string
}{
	{regexp.MustCompile(`^kbgen local `), "the job ran and a run did not pass (kbgen local --help)"},
	{regexp.MustCompile(`^kbgen doctor `), "a check failed (kbgen doctor --help)"},
	{regexp.MustCompile(`^kbgen node qualify `), "an agent failed the noise check (FAIL; kbgen node qualify --help)"},
}

// TestExitCodeContract checks every refusal path the CLI transcripts
// (golden/cli/*.ct) run against the one table of docs/formats.md "Exit
// codes": each code a command fails with is in the table, and 1 (the
// unexpected error) only where a check's verdict is documented as 1.
// Before: keygen (a file exists), node plan (too few cores, no GPUs),
// generate (a public key to sign with, no buildkite-agent) exited 1.
func TestExitCodeContract(t *testing.T) {
	documented := documentedExitCodes(t)
	t.Run("docs/formats.md's table is internal/exitcode's", func(t *testing.T) {
		compareExitCodeTables(t, documented, exitcodeConstants(t))
	})
	files, _ := filepath.Glob("../../golden/cli/*.ct")
	fail := regexp.MustCompile(`^\$ (kbgen .*) --> FAIL (\d+)$`)
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(string(data), "\n") {
			m := fail.FindStringSubmatch(l)
			if m == nil {
				continue
			}
			seen++
			code, _ := strconv.Atoi(m[2])
			switch {
			case documented[code] == "":
				t.Errorf("%s: %q exits %d, which docs/formats.md's exit-code table does not list", filepath.Base(f), m[1], code)
			case code == 1 && !isVerdictOne(m[1]):
				t.Errorf("%s: %q exits 1, the unexpected error; a refusal is 2 (bad input), 65 (refused job) or 75 (machine fault)", filepath.Base(f), m[1])
			}
		}
	}
	if seen < 50 {
		t.Fatalf("found %d refusals in golden/cli: the extraction is broken", seen)
	}
}

func isVerdictOne(line string) bool {
	for _, v := range verdictOne {
		if v.re.MatchString(line) {
			return true
		}
	}
	return false
}

// notExits are internal/exitcode's constants that no kbgen command exits
// with: codes Buildkite reports for a job (exitcode.InfraRetryCodes retries
// them), so the table of what kbgen exits with does not list them.
var notExits = map[string]string{
	"AgentLost":  "Buildkite's status for a job whose agent vanished",
	"AgentInfra": "the agent's status for its own or the engine's failure",
}

// compareExitCodeTables fails on drift in either direction between the
// documented rows (code → name) and the constants (name → code): a row
// whose code or name no constant has, a constant no row lists.
// Before: nothing compared the names, and a constant added without a row
// (or a row renumbered) passed.
func compareExitCodeTables(t *testing.T, documented map[int]string, consts map[string]int) {
	t.Helper()
	for code, name := range documented {
		switch got, ok := consts[name]; {
		case !ok:
			t.Errorf("docs/formats.md lists %d %s; internal/exitcode has no constant %s", code, name, name)
		case got != code:
			t.Errorf("docs/formats.md lists %s as %d; internal/exitcode.%s is %d", name, code, name, got)
		}
	}
	for name, code := range consts {
		_, skip := notExits[name]
		if !skip && documented[code] != name {
			t.Errorf("internal/exitcode.%s (%d) has no row in docs/formats.md's exit-code table (row %d says %q)", name, code, code, documented[code])
		}
	}
	for name := range notExits {
		if _, ok := consts[name]; !ok {
			t.Errorf("notExits names %s, which internal/exitcode no longer has", name)
		}
	}
}

// exitcodeConstants are the constants of internal/exitcode/exitcode.go
// (the table) with their values, read from the source so that the table
// has one definition: a constant added there is seen here.
func exitcodeConstants(t *testing.T) map[string]int {
	t.Helper()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "../../internal/exitcode/exitcode.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{}).Check("exitcode", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]int{}
	for _, name := range pkg.Scope().Names() {
		if c, ok := pkg.Scope().Lookup(name).(*types.Const); ok && c.Exported() {
			v, _ := constant.Int64Val(c.Val())
			consts[name] = int(v)
		}
	}
	if len(consts) < 8 {
		t.Fatalf("found %d constants in internal/exitcode/exitcode.go: %v", len(consts), slices.Sorted(maps.Keys(consts)))
	}
	return consts
}

// documentedExitCodes are the rows of the "## Exit codes" table of
// docs/formats.md: code → name.
func documentedExitCodes(t *testing.T) map[int]string {
	t.Helper()
	data, err := os.ReadFile("../../docs/formats.md")
	if err != nil {
		t.Fatal(err)
	}
	_, table, ok := strings.Cut(string(data), "\n## Exit codes\n")
	if !ok {
		t.Fatal("docs/formats.md has no \"## Exit codes\" section")
	}
	table, _, _ = strings.Cut(table, "\n## ")
	codes := map[int]string{}
	for _, m := range regexp.MustCompile(`(?m)^\| (-?\d+) \| (\w+) \|`).FindAllStringSubmatch(table, -1) {
		n, _ := strconv.Atoi(m[1])
		if codes[n] != "" {
			t.Errorf("docs/formats.md's exit-code table lists %d twice", n)
		}
		codes[n] = m[2]
	}
	if len(codes) < 8 {
		t.Fatalf("found %d codes in docs/formats.md's exit-code table", len(codes))
	}
	return codes
}
