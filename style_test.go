package redmap

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// One error style per package: an error made in a public package says where
// it comes from, either by its package's name ("manager: ...") or by the
// redmap error it wraps first ("%w: ...", which reads "redmap: <kind>: ...").
// internal/rdb names the operation instead ("take: ..."), and its callers add
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
