package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"

	"github.com/gpu-mode/kbgen/internal/golden"
	"github.com/gpu-mode/kbgen/internal/kbgenbin"
)

// qualifyReference are the runs docs/vendor-onboarding.md shows as its
// reference output of kbgen node qualify, on the one-agent fixture node
// (its agent owns CPU 1 of this machine): the thresholds pick the
// verdict, so each shows the same verdict wherever it runs.
var qualifyReference = []struct {
	marker string // the HTML comment before the output's fenced block
	args   string
	code   int
}{
	{"<!-- qualify reference: PASS -->", "--max-cv 1000 --max-steal 100", 0},
	{"<!-- qualify reference: FAIL -->", "--max-cv 0.001 --max-steal 100", 1},
}

const qualifyFixture = "node qualify --no-sandbox --sysfs node/testdata/rehearsal/sys --nvidia-smi node/testdata/rehearsal/nvidia-smi.csv --reserve-memory 1g --gpu off "

// TestQualifyReferenceInDocs runs kbgen node qualify on the fixture node
// as docs/vendor-onboarding.md prints it and compares the output with the
// doc's reference blocks: the same columns, agents, verdicts and summary;
// the measured numbers and the noise sources seen are this machine's and
// are not compared. UPDATE_GOLDEN=1 rewrites the blocks with this run.
func TestQualifyReferenceInDocs(t *testing.T) {
	const docPath = "../../docs/vendor-onboarding.md"
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	bin := kbgenbin.Path(t)
	for _, ref := range qualifyReference {
		line := "kbgen " + qualifyFixture + ref.args
		if !bytes.Contains(doc, []byte(line)) {
			t.Errorf("docs/vendor-onboarding.md does not print %q", line)
		}
		cmd := exec.Command(bin, strings.Fields(qualifyFixture+ref.args)...)
		cmd.Dir = "../.."
		var out bytes.Buffer
		cmd.Stdout = &out
		_ = cmd.Run()
		if got := cmd.ProcessState.ExitCode(); got != ref.code {
			t.Fatalf("%s: exit %d, want %d\n%s", line, got, ref.code, out.String())
		}
		block, start, end, err := blockAfter(doc, ref.marker)
		if err != nil {
			t.Fatal(err)
		}
		if golden.Update() {
			doc = append(doc[:start:start], append(out.Bytes(), doc[end:]...)...)
			continue
		}
		if want, got := qualifyShape(block), qualifyShape(out.String()); want != got {
			t.Errorf("the reference output after %s drifted from a run (numbers and noise sources masked); UPDATE_GOLDEN=1 rewrites it\n%s",
				ref.marker, golden.Diff([]byte(got), []byte(want)))
		}
	}
	if golden.Update() {
		if err := os.WriteFile(docPath, doc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// blockAfter is the body of the first fenced block after marker, and its
// byte range in doc.
func blockAfter(doc []byte, marker string) (string, int, int, error) {
	i := bytes.Index(doc, []byte(marker))
	if i < 0 {
		return "", 0, 0, fmt.Errorf("docs/vendor-onboarding.md has no %s", marker)
	}
	open := bytes.Index(doc[i:], []byte("```\n"))
	if open < 0 {
		return "", 0, 0, fmt.Errorf("no fenced block after %s", marker)
	}
	start := i + open + len("```\n")
	end := bytes.Index(doc[start:], []byte("```"))
	if end < 0 {
		return "", 0, 0, fmt.Errorf("the block after %s is not closed", marker)
	}
	return string(doc[start : start+end]), start, start + end, nil
}

var (
	qualifyNumber  = regexp.MustCompile(`[+-]?\d+(\.\d+)?`)
	qualifyVerdict = regexp.MustCompile(`\s((pass|fail)\b.*)$`)
)

// qualifyShape is a qualify table without what a run measures: the
// header, per agent its name, CPUs and verdict, and the summary, numbers
// masked and spaces collapsed.
func qualifyShape(s string) string {
	var out []string
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) == 0:
			continue
		case f[0] == "AGENT", strings.HasPrefix(f[0], "PASS:"), strings.HasPrefix(f[0], "FAIL:"):
			out = append(out, strings.Join(f, " "))
		default:
			verdict := ""
			if m := qualifyVerdict.FindStringSubmatch(l); m != nil {
				verdict = m[1]
			}
			out = append(out, strings.Join(f[:min(2, len(f))], " ")+" … "+verdict)
		}
	}
	return qualifyNumber.ReplaceAllString(strings.Join(out, "\n"), "N")
}
