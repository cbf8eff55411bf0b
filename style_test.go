package redmap

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// One error style per package: an error made in a public package says where
// it comes from, either by its package's name ("manager: ...") or by the
// redmap error it wraps first ("%w: ...", which reads "redmap: <kind>: ...").
// internal/broker/redisbroker names the operation instead ("take: ..."), and its callers add
// their package's name.
func TestErrorStyle(t *testing.T) {
	for dir, name := range map[string]string{".": "redmap", "manager": "manager", "worker": "worker", "cache": "cache", "codec": "codec", "connect": "connect", "inspect": "inspect"} {
		files, _ := filepath.Glob(filepath.Join(dir, "*.go"))
		if len(files) == 0 {
			t.Fatalf("no Go files in %s", dir)
		}
		fset := token.NewFileSet()
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			file, err := parser.ParseFile(fset, f, nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			ast.Inspect(file, func(n ast.Node) bool {
				call, ok := n.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok {
					return true
				}
				if pkg, ok := sel.X.(*ast.Ident); !ok || !(pkg.Name == "errors" && sel.Sel.Name == "New" || pkg.Name == "fmt" && sel.Sel.Name == "Errorf") {
					return true
				}
				lit, ok := call.Args[0].(*ast.BasicLit)
				if !ok {
					return true
				}
				msg, _ := strconv.Unquote(lit.Value)
				if !strings.HasPrefix(msg, name+": ") && !strings.HasPrefix(msg, "%w") {
					t.Errorf("%s: error %q starts with neither %q nor a wrapped redmap error", fset.Position(lit.Pos()), msg, name+": ")
				}
				return true
			})
		}
	}
}

// The packages redmap is built on never import it: the error vocabulary
// lives in internal/failure, which this package re-exports, and a handle
// holds its runtime itself. Only the test helpers (internal/harness and the
// typetest handles) may: they build managers and workers as users do.
func TestNoArrowUp(t *testing.T) {
	helpers := map[string]bool{"internal/harness": true, "internal/typetest": true}
	checked := 0
	for _, root := range []string{"internal", "cache", "codec"} {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && helpers[filepath.ToSlash(path)] {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return nil
			}
			file, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			checked++
			for _, imp := range file.Imports {
				if p, _ := strconv.Unquote(imp.Path.Value); p == "github.com/redmap/redmap" {
					t.Errorf("%s imports the root package %s", path, p)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if checked < 50 {
		t.Fatalf("checked %d files, want the whole of internal/, cache/ and codec/", checked)
	}
}
