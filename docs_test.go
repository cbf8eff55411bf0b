package redmap

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
