// Package importcheck enforces the package boundaries of docs/architecture.md
// from tests: a pure package imports only the standard library and the few
// project packages it is allowed (Only); and a package's functions stay
// short enough to read at once (ShortFuncs).
package importcheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Only fails tb when a non-test Go file in dir imports anything but the
// standard library or one of allowed (full import paths).
func Only(tb testing.TB, dir string, allowed ...string) {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		tb.Fatal(err)
	}
	if len(files) == 0 {
		tb.Fatalf("no Go files in %s", dir)
	}
	ok := make(map[string]bool, len(allowed))
	for _, a := range allowed {
		ok[a] = true
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			tb.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			// Standard library paths have no dot in their first element.
			first, _, _ := strings.Cut(p, "/")
			if !strings.Contains(first, ".") || ok[p] {
				continue
			}
			tb.Errorf("%s imports %q: only the standard library and %v are allowed", filepath.Base(f), p, allowed)
		}
	}
}

// ShortFuncs fails tb for every function or method of the non-test Go
// files in dir longer than max lines, counted from its func keyword to
// its closing brace (its doc comment aside).
func ShortFuncs(tb testing.TB, dir string, max int) {
	tb.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		tb.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			tb.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			start, end := fset.Position(fd.Pos()), fset.Position(fd.End())
			if n := end.Line - start.Line + 1; n > max {
				tb.Errorf("%s:%d: %s is %d lines long, more than %d: split it into named steps", filepath.Base(f), start.Line, fd.Name.Name, n, max)
			}
		}
	}
}
