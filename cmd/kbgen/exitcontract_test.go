package main

import (
	"os"
	"path/filepath"
	"regexp"
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
			case !documented[code]:
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

// documentedExitCodes are the codes of the "## Exit codes" table of
// docs/formats.md.
func documentedExitCodes(t *testing.T) map[int]bool {
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
	codes := map[int]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\| (-?\d+) \|`).FindAllStringSubmatch(table, -1) {
		n, _ := strconv.Atoi(m[1])
		codes[n] = true
	}
	if len(codes) < 8 {
		t.Fatalf("found %d codes in docs/formats.md's exit-code table", len(codes))
	}
	return codes
}
