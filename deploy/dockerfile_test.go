package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/redmap/redmap/internal/harness"
	"github.com/redmap/redmap/internal/redistest"
)

// The Dockerfile caches modules and builds, labels the image and stamps the
// binary's version; .dockerignore keeps .git out of the context and keeps
// in every file the programs' builds read. The stamp is checked by building
// with the Dockerfile's own -ldflags and reading the worker's start line.
func TestDockerfile(t *testing.T) {
	t.Parallel() // each builds and runs processes of its own
	b, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	df := string(b)
	// Its instructions, continuation lines joined.
	var lines []string
	for _, l := range strings.Split(strings.ReplaceAll(df, "\\\n", " "), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	instr := func(prefix, contains string) string {
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) && strings.Contains(l, contains) {
				return l
			}
		}
		t.Fatalf("the Dockerfile has no %s ... %s ...", prefix, contains)
		return ""
	}
	const modCache, buildCache = "--mount=type=cache,target=/go/pkg/mod", "--mount=type=cache,target=/root/.cache/go-build"
	if l := instr("RUN ", "go mod download"); !strings.Contains(l, modCache) {
		t.Errorf("go mod download without the module cache mount: %s", l)
	}
	goBuild := instr("RUN ", "go build")
	if !strings.Contains(goBuild, modCache) || !strings.Contains(goBuild, buildCache) {
		t.Errorf("go build without the module and build cache mounts: %s", goBuild)
	}
	// Every base image fully qualified (registry/name:tag), so that a stock
	// podman, with no unqualified-search registries, pulls it.
	for _, l := range lines {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "FROM" && f[1] != "scratch" && !qualified(f[1]) {
			t.Errorf("the Dockerfile's %q names its base image without its registry (docker.io/library/...)", l)
		}
	}
	runtime := df[strings.Index(df, "FROM scratch AS runtime"):]
	for _, label := range []string{`org.opencontainers.image.source="${SOURCE}"`, `org.opencontainers.image.version="${VERSION}"`, `org.opencontainers.image.revision="${REVISION}"`} {
		if !strings.Contains(runtime, label) {
			t.Errorf("the runtime stage has no LABEL %s", label)
		}
	}
	for _, arg := range []string{"ARG VERSION", "ARG REVISION", "ARG SOURCE"} {
		if !strings.Contains(runtime, arg) {
			t.Errorf("the runtime stage does not declare %s (its labels would be empty)", arg)
		}
	}

	// .dockerignore: .git out, every file of the programs' builds in.
	ign, err := os.ReadFile("../.dockerignore")
	if err != nil {
		t.Fatalf("no .dockerignore at the root of the build context: %v", err)
	}
	var patterns []string
	for _, l := range strings.Split(string(ign), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			patterns = append(patterns, l)
		}
	}
	if !ignored(patterns, ".git") || !ignored(patterns, ".git/config") {
		t.Errorf(".dockerignore %v keeps .git in the context", patterns)
	}
	for _, f := range buildFiles(t, "./examples/squares", "./cmd/redmap") {
		if ignored(patterns, f) {
			t.Errorf(".dockerignore leaves out %s, which the build reads", f)
		}
	}

	// The stamp: the Dockerfile's -ldflags, with VERSION set, reach the
	// worker's "worker started" line.
	ld := regexp.MustCompile(`-ldflags="([^"]*)"`).FindStringSubmatch(goBuild)
	if ld == nil || !strings.Contains(ld[1], "${VERSION}") {
		t.Fatalf("go build stamps no ${VERSION}: %s", goBuild)
	}
	const version = "v0.0.0-deploy-test"
	bin := buildFlags(t, "./examples/squares", []string{"-ldflags=" + strings.ReplaceAll(ld[1], "${VERSION}", version)})
	srv := redistest.Shared(t)
	cmd := exec.Command(bin, "worker")
	cmd.Env = append(os.Environ(), "REDIS_URL="+srv.URL(), "REDMAP_QUEUE="+redistest.Queue(t))
	p := harness.Start(t, cmd)
	p.WaitLog(t, "version="+version)
}

// ignored reports whether .dockerignore's patterns leave out path (slash
// separated, from the context's root): a pattern that matches the path or
// one of its parent directories; "**/" matches any directories. (Enough
// for the patterns used here; no "!" exceptions.)
func ignored(patterns []string, path string) bool {
	parts := strings.Split(path, "/")
	for _, p := range patterns {
		p = strings.TrimPrefix(p, "/")
		for i := 1; i <= len(parts); i++ {
			if ok, _ := filepath.Match(p, strings.Join(parts[:i], "/")); ok {
				return true
			}
			if rest, ok := strings.CutPrefix(p, "**/"); ok {
				for j := 0; j < i; j++ {
					if ok, _ := filepath.Match(rest, strings.Join(parts[j:i], "/")); ok {
						return true
					}
				}
			}
		}
	}
	return false
}

// buildFiles lists the files of redmap's module that building pkgs reads:
// go.mod, go.sum and the Go, embedded and other files of each package of
// the module they import, relative to the module's root.
func buildFiles(t *testing.T, pkgs ...string) []string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-deps", "-f",
		`{{if .Module}}{{if eq .Module.Path "github.com/redmap/redmap"}}{{$d := .Dir}}{{range .GoFiles}}{{$d}}/{{.}}
{{end}}{{range .EmbedFiles}}{{$d}}/{{.}}
{{end}}{{range .SFiles}}{{$d}}/{{.}}
{{end}}{{end}}{{end}}`}, pkgs...)...)
	cmd.Dir = ".."
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"go.mod", "go.sum"}
	for _, f := range strings.Fields(string(out)) {
		rel, err := filepath.Rel(root, f)
		if err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("%s is outside the module at %s", f, root)
		}
		files = append(files, filepath.ToSlash(rel))
	}
	if len(files) < 10 {
		t.Fatalf("go list found %d files: %v", len(files), files)
	}
	return files
}

// qualified reports whether image names its registry: a first path element
// with a dot or a port, or localhost.
func qualified(image string) bool {
	reg, _, ok := strings.Cut(image, "/")
	return ok && (strings.ContainsAny(reg, ".:") || reg == "localhost")
}
