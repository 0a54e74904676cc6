// Command codestats prints the numbers docs/architecture.md's "How we keep
// it clean" section records: functions' average length and the share over
// 50 lines (non-test Go files), and the branches in each command file of
// cmd/kbgen (if, for, case, && and ||: gocyclo's count less one), so
// anyone can re-run them. Its test (TestArchitectureNumbers) fails when
// the page drifts from what it measures.
//
//	go run ./scripts/codestats
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

func main() {
	root := "."
	if len(os.Args) > 1 {
		root = os.Args[1]
	}
	s, err := measure(root)
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	s.report()
}

// stats are the code's numbers: every non-test function's length in
// lines, and each cmd/kbgen file's branches.
type stats struct {
	lengths     []int
	cmdBranches map[string]int
}

// measure parses every non-test Go file under root (testdata and hidden
// directories left out).
func measure(root string) (stats, error) {
	s := stats{cmdBranches: map[string]int{}}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		for _, decl := range f.Decls {
			if fn, ok := decl.(*ast.FuncDecl); ok && fn.Body != nil {
				s.lengths = append(s.lengths, fset.Position(fn.End()).Line-fset.Position(fn.Pos()).Line+1)
			}
		}
		if rel, _ := filepath.Rel(root, p); filepath.Dir(rel) == filepath.Join("cmd", "kbgen") {
			s.cmdBranches[filepath.Base(p)] = branches(f)
		}
		return nil
	})
	return s, err
}

// branches counts the decision points in f.
func branches(f *ast.File) int {
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		switch x := node.(type) {
		case *ast.IfStmt, *ast.ForStmt, *ast.RangeStmt:
			n++
		case *ast.CaseClause:
			if x.List != nil { // default is not a branch of its own
				n++
			}
		case *ast.CommClause:
			if x.Comm != nil {
				n++
			}
		case *ast.BinaryExpr:
			if x.Op == token.LAND || x.Op == token.LOR {
				n++
			}
		}
		return true
	})
	return n
}

// averageLength is the functions' mean length in lines.
func (s stats) averageLength() float64 {
	total := 0
	for _, l := range s.lengths {
		total += l
	}
	return float64(total) / float64(len(s.lengths))
}

// over50 is how many functions are longer than 50 lines, and their share
// in percent.
func (s stats) over50() (int, float64) {
	over := 0
	for _, l := range s.lengths {
		if l > 50 {
			over++
		}
	}
	return over, 100 * float64(over) / float64(len(s.lengths))
}

// cmdFiles are cmd/kbgen's files, most branches first.
func (s stats) cmdFiles() []string {
	files := make([]string, 0, len(s.cmdBranches))
	for f := range s.cmdBranches {
		files = append(files, f)
	}
	sort.Slice(files, func(i, j int) bool {
		if s.cmdBranches[files[i]] != s.cmdBranches[files[j]] {
			return s.cmdBranches[files[i]] > s.cmdBranches[files[j]]
		}
		return files[i] < files[j]
	})
	return files
}

// cmdAverage is cmd/kbgen's branches per file.
func (s stats) cmdAverage() float64 {
	sum := 0
	for _, b := range s.cmdBranches {
		sum += b
	}
	return float64(sum) / float64(len(s.cmdBranches))
}

func (s stats) report() {
	over, share := s.over50()
	fmt.Printf("functions: %d, average %.1f lines, %.1f %% over 50 lines (%d)\n", len(s.lengths), s.averageLength(), share, over)
	files := s.cmdFiles()
	fmt.Printf("cmd/kbgen: %d files, %.1f branches per file on average; the most:\n", len(files), s.cmdAverage())
	for _, f := range files[:min(8, len(files))] {
		fmt.Printf("  %-22s %d\n", f, s.cmdBranches[f])
	}
}
