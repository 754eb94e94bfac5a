// Package imports checks, in a package's tests, what the package's own
// (non-test) files import: the house's rules of what knows what (the
// cache core knows no transport, the guard no route), held by a test.
package imports

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// Refuse fails t for each import of the package in the current directory
// that is one of banned or below one of them.
func Refuse(t testing.TB, why string, banned ...string) {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		pf, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range pf.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			for _, b := range banned {
				if path == b || strings.HasPrefix(path, b+"/") {
					t.Errorf("%s imports %s: %s", f, path, why)
				}
			}
		}
	}
}
