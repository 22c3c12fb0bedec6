// Package importcheck enforces the package boundaries of docs/architecture.md
// from tests: a pure package imports only the standard library and the few
// project packages it is allowed.
package importcheck

import (
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
