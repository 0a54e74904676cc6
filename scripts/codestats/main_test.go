package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// repoRoot is the module root, two levels up from this package.
const repoRoot = "../.."

// docNumbers are the rows of docs/architecture.md's "How we keep it
// clean" table: each row's first cell, to its "now" cell.
func docNumbers(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "## How we keep it clean")
	section, _, _ = strings.Cut(section, "What keeps it so:")
	if !ok {
		t.Fatal("docs/architecture.md has no \"How we keep it clean\" section")
	}
	rows := map[string]string{}
	for line := range strings.Lines(section) {
		cells := strings.Split(strings.ReplaceAll(strings.TrimSpace(line), `\|`, "¦"), " | ")
		if len(cells) == 3 && strings.HasPrefix(cells[0], "| ") {
			rows[strings.TrimPrefix(cells[0], "| ")] = cells[1]
		}
	}
	return rows
}

// row is the numbers of the row named what, by pattern; the test fails
// when the row is gone or no longer reads so.
func row(t *testing.T, rows map[string]string, what, pattern string) []float64 {
	t.Helper()
	cell, ok := rows[what]
	if !ok {
		t.Fatalf("docs/architecture.md: no row %q in \"How we keep it clean\"", what)
	}
	m := regexp.MustCompile(`^` + pattern).FindStringSubmatch(cell)
	if m == nil {
		t.Fatalf("docs/architecture.md: row %q reads %q, not %s", what, cell, pattern)
	}
	nums := make([]float64, len(m)-1)
	for i, s := range m[1:] {
		nums[i], _ = strconv.ParseFloat(s, 64)
	}
	return nums
}

// within fails t unless got is want ± tol (tol 0: exactly).
func within(t *testing.T, what string, got, want, tol float64) {
	t.Helper()
	if got < want-tol || got > want+tol {
		t.Errorf("%s is %g, docs/architecture.md says %g (±%g): update the page (the command beside it measures it)", what, got, want, tol)
	}
}

// TestArchitectureNumbers: every measured number of docs/architecture.md's
// "How we keep it clean" is what the code measures now, within its
// stated tolerance.
func TestArchitectureNumbers(t *testing.T) {
	rows := docNumbers(t)
	s, err := measure(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	t.Run("functions", func(t *testing.T) {
		n := row(t, rows, "functions (non-test), average length", `([0-9.]+) lines \[±([0-9.]+)\] over ([0-9]+) \[±([0-9]+) %\] functions`)
		within(t, "the average function length", s.averageLength(), n[0], n[1])
		within(t, "the function count", float64(len(s.lengths)), n[2], n[2]*n[3]/100)
		over, share := s.over50()
		m := row(t, rows, "functions over 50 lines", `([0-9.]+) % \[±([0-9.]+)\] \(([0-9]+)\)`)
		within(t, "the share of functions over 50 lines", share, m[0], m[1])
		t.Logf("%d functions, average %.1f lines, %d over 50 (%.1f %%)", len(s.lengths), s.averageLength(), over, share)
	})
	t.Run("cmd/kbgen", func(t *testing.T) {
		n := row(t, rows, "branches per `cmd/kbgen` file (if, for, case, `&&`, `¦¦`)", `([0-9.]+) \[±([0-9.]+)\] on average over ([0-9]+) \[exact\] files; at most ([0-9]+) \[±([0-9]+)\]`)
		within(t, "cmd/kbgen's branches per file", s.cmdAverage(), n[0], n[1])
		within(t, "cmd/kbgen's file count", float64(len(s.cmdBranches)), n[2], 0)
		within(t, "cmd/kbgen's most branches in a file", float64(s.cmdBranches[s.cmdFiles()[0]]), n[3], n[4])
	})
	for _, pkg := range []string{"serve", "node", "qualify", "sandbox"} {
		t.Run(pkg, func(t *testing.T) {
			n := row(t, rows, "kbgen packages `"+pkg+"` links", `([0-9]+) \[exact\]`)
			within(t, "the kbgen packages "+pkg+" links", float64(kbgenDeps(t, pkg)), n[0], 0)
		})
	}
	t.Run("t.Parallel", func(t *testing.T) {
		n := row(t, rows, "`t.Parallel` calls in tests", `([0-9]+) \[±([0-9]+) %\]`)
		within(t, "the t.Parallel calls", float64(parallelCalls(t)), n[0], n[0]*n[1]/100)
	})
	t.Run("binary", func(t *testing.T) {
		if testing.Short() {
			t.Skip("-short: no kbgen build")
		}
		n := row(t, rows, "static binary `cmd/kbgen`", `([0-9.]+) MB \[±([0-9]+) %\]`)
		within(t, "the static kbgen in MB", binaryMB(t), n[0], n[0]*n[1]/100)
	})
}

// kbgenDeps is `go list -deps ./pkg | grep -c gpu-mode/kbgen`.
func kbgenDeps(t *testing.T, pkg string) int {
	t.Helper()
	cmd := exec.Command("go", "list", "-deps", "./"+pkg)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./%s: %v", pkg, err)
	}
	return strings.Count(string(out), "gpu-mode/kbgen")
}

// parallelCalls counts `t.Parallel()` in the module's test files, as the
// page's grep does.
func parallelCalls(t *testing.T) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(repoRoot, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != repoRoot && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		for line := range strings.Lines(string(b)) {
			if strings.Contains(line, "t.Parallel()") {
				n++
			}
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// binaryMB builds kbgen as the page's command does and is its size in MB.
func binaryMB(t *testing.T) float64 {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "kbgen")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/kbgen")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/kbgen: %v\n%s", err, out)
	}
	fi, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	return float64(fi.Size()) / 1e6
}
