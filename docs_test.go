package redmap

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/redmap/redmap/internal/picture"
)

// README is the user's guide, short; the reference lives in docs/, and
// every relative link of either resolves. Sentences that contradicted what
// is tested stay gone.
func TestDocs(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(readme), "\n"); n > 250 {
		t.Errorf("README.md has %d lines; the user's guide stays under 250 (the reference goes to docs/)", n)
	}
	if !strings.HasPrefix(string(readme), "# redmap") || !strings.Contains(string(readme), "go run ./examples/quickstart") ||
		!strings.Contains(string(readme), "make test") {
		t.Error("README.md must begin with what redmap is and the two commands a newcomer runs")
	}
	arch, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(arch), "\n"); n > 300 {
		t.Errorf("docs/ARCHITECTURE.md has %d lines; the map stays under 300 (the reference goes to docs/protocol.md)", n)
	}
	// Docs say what is; how it came to be goes to CHANGELOG.
	diary := regexp.MustCompile(`(?i)\b(stop|issue)s? #?\d+\b`)
	docs, _ := filepath.Glob("docs/*.md")
	link := regexp.MustCompile(`\]\(([^)#:]+)(#[^)]*)?\)`)
	for _, f := range append(docs, "README.md", "CHANGELOG.md") {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			if _, err := os.Stat(filepath.Join(filepath.Dir(f), m[1])); err != nil {
				t.Errorf("%s links to %s, which does not exist", f, m[1])
			}
		}
		if f != "CHANGELOG.md" {
			for _, m := range diary.FindAllString(string(b), -1) {
				if !strings.Contains(string(b), "go-redis "+m) { // an upstream issue is a reference, not a diary
					t.Errorf("%s says %q: a diary entry, which belongs in CHANGELOG", f, m)
				}
			}
		}
		for _, old := range []string{"Cluster is not tested", "not tested yet", "see README, \"Redis settings\""} {
			if f != "CHANGELOG.md" && strings.Contains(string(b), old) { // CHANGELOG keeps what was once so
				t.Errorf("%s still says %q", f, old)
			}
		}
	}
}

// The examples are for copying: they import no internal package.
func TestExamplesImportNoInternal(t *testing.T) {
	files, _ := filepath.Glob("examples/*/*.go")
	more, _ := filepath.Glob("examples/*/*/*.go")
	for _, f := range append(files, more...) {
		if strings.HasSuffix(f, "_test.go") {
			continue // tests may use the harness
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(string(b), `"github.com/redmap/redmap/internal/`) {
			t.Errorf("%s imports an internal package, which a user cannot copy", f)
		}
	}
}

// One element's path, as docs/ARCHITECTURE.md lists it in its path block,
// is what the code declares: each function is in the file named, and the
// count the document states is the block's.
func TestPathCounted(t *testing.T) {
	doc, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```path\n")
	block, _, ok2 := strings.Cut(rest, "```")
	stated := regexp.MustCompile(`<!-- path: (\d+) functions in (\d+) files -->`).FindStringSubmatch(string(doc))
	if !ok || !ok2 || stated == nil {
		t.Fatal("docs/ARCHITECTURE.md has no path block, or no <!-- path: N functions in M files --> line")
	}
	functions, files := 0, 0
	for line := range strings.Lines(block) {
		file, names, _ := strings.Cut(strings.TrimSpace(line), ":")
		if file == "" {
			continue
		}
		files++
		declared, err := declaredIn(file)
		if err != nil {
			t.Errorf("%s: %v", file, err)
			continue
		}
		for _, name := range strings.Fields(names) {
			functions++
			if !declared[name] {
				t.Errorf("%s does not declare %s", file, name)
			}
		}
	}
	t.Logf("one element's path: %d functions in %d files", functions, files)
	if want := stated[1] + " functions in " + stated[2] + " files"; want != strconv.Itoa(functions)+" functions in "+strconv.Itoa(files)+" files" {
		t.Errorf("ARCHITECTURE says %s; its path block has %d functions in %d files", want, functions, files)
	}
}

// declaredIn returns the functions a Go file declares ("Type.Method" for
// methods); a file of another kind (a Lua script) declares none.
func declaredIn(file string) (map[string]bool, error) {
	if _, err := os.Stat(file); err != nil {
		return nil, err
	}
	out := map[string]bool{}
	if filepath.Ext(file) != ".go" {
		return out, nil
	}
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	for _, d := range f.Decls {
		fd, ok := d.(*ast.FuncDecl)
		if !ok {
			continue
		}
		name := fd.Name.Name
		if fd.Recv != nil && len(fd.Recv.List) > 0 {
			typ := fd.Recv.List[0].Type
			if star, ok := typ.(*ast.StarExpr); ok {
				typ = star.X
			}
			switch x := typ.(type) {
			case *ast.IndexExpr:
				typ = x.X
			case *ast.IndexListExpr:
				typ = x.X
			}
			if id, ok := typ.(*ast.Ident); ok {
				name = id.Name + "." + name
			}
		}
		out[name] = true
	}
	return out, nil
}

// docs/architecture.svg is what internal/picture draws: a change to the
// picture's description shows in the file (make docs writes it).
func TestPicture(t *testing.T) {
	want := picture.Architecture()
	if os.Getenv("REDMAP_WRITE_DOCS") != "" {
		if err := os.WriteFile("docs/architecture.svg", want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("docs/architecture.svg")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("docs/architecture.svg is not what internal/picture draws: run make docs")
	}
}
