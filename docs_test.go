package redmap

import (
	"bytes"
	"cmp"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
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
// is what the code declares and the order it calls in: each function is in
// the file named; each is called (or referred to: a script by its
// <name>Script) by a function before it on the path, unless marked » as
// picked up from a channel or from Redis, or called through a function
// value made elsewhere; and the counts the document
// states are the block's. A file is entered when a function in it is
// reached from another file's, or picked up (unless it follows a function
// of its own file); the aim is each file entered once.
func TestPathCounted(t *testing.T) {
	doc, err := os.ReadFile("docs/ARCHITECTURE.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```path\n")
	block, _, ok2 := strings.Cut(rest, "```")
	stated := regexp.MustCompile(`<!-- path: (\d+) functions in (\d+) files, (\d+) entries -->`).FindStringSubmatch(string(doc))
	if !ok || !ok2 || stated == nil {
		t.Fatal("docs/ARCHITECTURE.md has no path block, or no <!-- path: N functions in M files, E entries --> line")
	}
	steps, err := pathSteps(block)
	if err != nil {
		t.Fatal(err)
	}
	problems, entered := walkPath(steps)
	for _, p := range problems {
		t.Error(p)
	}
	functions, files := map[string]bool{}, map[string]bool{}
	for _, s := range steps {
		files[s.file] = true
		if s.name != "" {
			functions[s.file+":"+s.name] = true
		}
	}
	var twice []string
	entries := 0
	for f, n := range entered {
		entries += n
		if n > 1 {
			twice = append(twice, f+" ×"+strconv.Itoa(n))
		}
	}
	slices.Sort(twice)
	t.Logf("one element's path: %d functions in %d files, %d entries; entered more than once: %s", len(functions), len(files), entries, strings.Join(twice, ", "))
	got := []string{strconv.Itoa(len(functions)), strconv.Itoa(len(files)), strconv.Itoa(entries)}
	if !slices.Equal(stated[1:], got) {
		t.Errorf("ARCHITECTURE says %s functions in %s files, %s entries; its path block has %s functions in %s files, %s entries",
			stated[1], stated[2], stated[3], got[0], got[1], got[2])
	}
}

// walkPath checks that each step but the first is called by one before it
// (or is picked up), and counts the entries into each file.
func walkPath(steps []pathStep) (problems []string, entered map[string]int) {
	entered = map[string]int{}
	for i, s := range steps {
		caller := -1
		for j := i - 1; j >= 0 && !s.pickedUp; j-- {
			if steps[j].refs[s.callee()] {
				caller = j
				break
			}
		}
		switch {
		case caller < 0 && !s.pickedUp && i > 0:
			problems = append(problems, fmt.Sprintf("%s: no function before it on the path calls %s (mark it » if it is picked up from a channel or from Redis, or called through a function value)", s.file, s))
		case s.pickedUp && i > 0 && steps[i-1].file == s.file:
			// called through a function value its file made: no entry
		case caller < 0 || steps[caller].file != s.file:
			entered[s.file]++
		}
	}
	return problems, entered
}

// The path's check fails a block out of call order, and counts a return to
// a file as no entry.
func TestPathOrderChecked(t *testing.T) {
	steps, err := pathSteps("docs_test.go: TestPathCounted pathSteps\ndocs_test.go: declaredIn\n")
	if err != nil {
		t.Fatal(err)
	}
	if problems, entered := walkPath(steps); len(problems) > 0 || entered["docs_test.go"] != 1 {
		t.Errorf("in order: problems %q, entries %v; want none, and one entry", problems, entered)
	}
	steps, err = pathSteps("docs_test.go: TestPathCounted declaredIn pathSteps\n")
	if err != nil {
		t.Fatal(err)
	}
	if problems, _ := walkPath(steps); len(problems) != 1 || !strings.Contains(problems[0], "calls declaredIn") {
		t.Errorf("out of order: problems %q; want one, that nothing before declaredIn calls it", problems)
	}
}

// pathStep is one step of the path block: a function (or a script: no
// name) of a file, what its body refers to, and whether it is picked up
// (from a channel, from Redis, through a function value) rather than called
// by name.
type pathStep struct {
	file, name string
	pickedUp   bool
	refs       map[string]bool
}

func (s pathStep) String() string { return cmp.Or(s.name, filepath.Base(s.file)) }

// callee is the name a caller refers to the step by: a method's or a
// function's own name, a script's <name>Script.
func (s pathStep) callee() string {
	if s.name == "" {
		return strings.TrimSuffix(filepath.Base(s.file), ".lua") + "Script"
	}
	_, m, _ := strings.Cut(s.name, ".")
	return cmp.Or(m, s.name)
}

// pathSteps reads the path block: "file: F G ..." lines in the order of the
// path, a file on as many lines as the path returns to it.
func pathSteps(block string) ([]pathStep, error) {
	var steps []pathStep
	parsed := map[string]map[string]map[string]bool{}
	for line := range strings.Lines(block) {
		file, names, _ := strings.Cut(strings.TrimSpace(line), ":")
		if file == "" {
			continue
		}
		decls, ok := parsed[file]
		if !ok {
			var err error
			if decls, err = declaredIn(file); err != nil {
				return nil, fmt.Errorf("%s: %v", file, err)
			}
			parsed[file] = decls
		}
		if filepath.Ext(file) != ".go" {
			steps = append(steps, pathStep{file: file, pickedUp: strings.HasPrefix(strings.TrimSpace(names), "»")})
			continue
		}
		for _, name := range strings.Fields(names) {
			s := pathStep{file: file, name: strings.TrimPrefix(name, "»"), pickedUp: strings.HasPrefix(name, "»")}
			refs, ok := decls[s.name]
			if !ok {
				return nil, fmt.Errorf("%s does not declare %s", file, s.name)
			}
			s.refs = refs
			steps = append(steps, s)
		}
	}
	return steps, nil
}

// declaredIn returns the functions a Go file declares ("Type.Method" for
// methods), each with the names its body refers to; a file of another kind
// (a Lua script) declares none.
func declaredIn(file string) (map[string]map[string]bool, error) {
	if _, err := os.Stat(file); err != nil {
		return nil, err
	}
	out := map[string]map[string]bool{}
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
		refs := map[string]bool{}
		if fd.Body != nil {
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					refs[id.Name] = true
				}
				return true
			})
		}
		out[name] = refs
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
