// Command codestats prints the numbers docs/architecture.md's "How we keep
// it clean" section records: functions' average length and the share over
// 50 lines (non-test Go files), and the branches in each command file of
// cmd/kbgen (if, for, case, && and ||: gocyclo's count less one), so
// anyone can re-run them.
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
	var lengths []int
	cmdBranches := map[string]int{}
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
				lengths = append(lengths, fset.Position(fn.End()).Line-fset.Position(fn.Pos()).Line+1)
			}
		}
		if rel, _ := filepath.Rel(root, p); filepath.Dir(rel) == filepath.Join("cmd", "kbgen") {
			cmdBranches[filepath.Base(p)] = branches(f)
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "codestats:", err)
		os.Exit(1)
	}
	report(lengths, cmdBranches)
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

func report(lengths []int, cmdBranches map[string]int) {
	total, over := 0, 0
	for _, l := range lengths {
		total += l
		if l > 50 {
			over++
		}
	}
	fmt.Printf("functions: %d, average %.1f lines, %.1f %% over 50 lines (%d)\n",
		len(lengths), float64(total)/float64(len(lengths)), 100*float64(over)/float64(len(lengths)), over)
	files := make([]string, 0, len(cmdBranches))
	sum := 0
	for f, b := range cmdBranches {
		files = append(files, f)
		sum += b
	}
	sort.Slice(files, func(i, j int) bool { return cmdBranches[files[i]] > cmdBranches[files[j]] })
	fmt.Printf("cmd/kbgen: %d files, %.1f branches per file on average; the most:\n", len(files), float64(sum)/float64(len(files)))
	for _, f := range files[:min(8, len(files))] {
		fmt.Printf("  %-22s %d\n", f, cmdBranches[f])
	}
}
