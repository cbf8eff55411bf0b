// Command pipeline ranks the identifiers of every .go file under a
// directory with a pipeline of four steps, all on the workers: each file's
// identifiers (a flat map), their counts (by key), the five most frequent
// per first letter (by key again), and a line per letter. Only the paths
// go out and the lines come back; the identifiers and counts stay on the
// fleet, in Redis between the by-key steps.
//
//	go run ./examples/pipeline                          # one process, embedded Redis
//	go run ./examples/pipeline worker [-concurrency N]  # a worker process (REDIS_URL)
//	go run ./examples/pipeline manager [-dir D]         # the manager (REDIS_URL)
//	go run ./examples/pipeline sequential [-dir D]      # the same ranking, in one goroutine
//
// The default directory is the Go toolchain's own source tree,
// $(go env GOROOT)/src. The output is one line per first letter, sorted.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/redmap/redmap/connect"
	"github.com/redmap/redmap/examples/pipeline/steps"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

func main() {
	args := os.Args[1:]
	cmd := "local"
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		cmd, args = args[0], args[1:]
	}
	var err error
	switch cmd {
	case "worker":
		if os.Getenv("REDMAP_QUEUE") == "" {
			os.Setenv("REDMAP_QUEUE", "pipeline")
		}
		err = worker.Main(args, steps.All...)
	case "manager", "local", "sequential":
		err = run(cmd, args)
	default:
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "pipeline:", err)
		os.Exit(1)
	}
}

const usage = "usage: pipeline [local|manager|sequential] [-dir D] [-queue Q] | pipeline worker [worker flags]"

func run(cmd string, args []string) error {
	flags := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := flags.String("dir", goSrc(), "directory whose .go files to rank the identifiers of")
	queue := flags.String("queue", "pipeline", "queue to submit to")
	if err := flags.Parse(args); err != nil {
		return err
	}
	paths, err := goFiles(*dir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var lines []string
	if cmd == "sequential" {
		lines, err = sequential(paths)
	} else {
		lines, err = pipeline(ctx, cmd, *queue, paths)
	}
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "%d files ranked in %v\n", len(paths), time.Since(start).Round(time.Millisecond))
	slices.Sort(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	return nil
}

// pipeline runs the four steps on the queue's workers: REDIS_URL's (or,
// local with REDIS_URL unset, an embedded Redis with a worker in this
// process).
func pipeline(ctx context.Context, cmd, queue string, paths []string) ([]string, error) {
	url := os.Getenv("REDIS_URL")
	if url == "" && cmd == "local" {
		mr, err := miniredis.Run()
		if err != nil {
			return nil, err
		}
		defer mr.Close()
		url = "redis://" + mr.Addr()
	} else if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	rdb, err := connect.URL(url)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	defer rdb.Close()
	if cmd == "local" {
		w, err := worker.New(rdb, worker.Options{Queue: queue})
		if err != nil {
			return nil, err
		}
		if err := w.Register(steps.All...); err != nil {
			return nil, err
		}
		wctx, stopWorker := context.WithCancel(context.Background())
		ran := make(chan error, 1)
		go func() { ran <- w.Run(wctx) }()
		defer func() { stopWorker(); <-ran }()
	}
	m, err := manager.New(rdb, manager.Options{Queue: queue})
	if err != nil {
		return nil, err
	}
	defer m.Close()

	idents := manager.FlatThen(manager.From(paths), steps.Identifiers)
	counts := manager.ByKey(idents, steps.One, steps.Sum)
	best := manager.ByKey(counts, steps.ByLetter, steps.Best)
	return manager.Collect(ctx, m, manager.Then(best, steps.Line))
}

// sequential is the same ranking in one goroutine.
func sequential(paths []string) ([]string, error) {
	counts := map[string]int{}
	for _, p := range paths {
		src, err := os.ReadFile(p)
		if err != nil {
			return nil, err
		}
		steps.Scan(src, func(id string) { counts[id]++ })
	}
	letters := map[string][]steps.Count{}
	for id, n := range counts {
		l := strings.ToLower(id[:1])
		letters[l] = append(letters[l], steps.Count{Ident: id, N: n})
	}
	var lines []string
	for l, cs := range letters {
		lines = append(lines, steps.Format(l, steps.Keep(cs)))
	}
	return lines, nil
}

// goFiles returns the paths of the .go files under dir.
func goFiles(dir string) ([]string, error) {
	var paths []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() && strings.HasSuffix(p, ".go") {
			paths = append(paths, p)
		}
		return nil
	})
	return paths, err
}

// goSrc returns the Go toolchain's source tree, or "" if there is no go
// command to ask.
func goSrc() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return ""
	}
	return filepath.Join(strings.TrimSpace(string(out)), "src")
}
