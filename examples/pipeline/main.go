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
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/redmap/redmap/examples/internal/demo"
	"github.com/redmap/redmap/examples/pipeline/steps"
	"github.com/redmap/redmap/manager"
)

func main() {
	demo.Main("pipeline", usage, []string{"local", "manager", "sequential"}, run, steps.All...)
}

const usage = "usage: pipeline [local|manager|sequential] [-dir D] [-queue Q] | pipeline worker [worker flags]"

func run(cmd string, args []string) error {
	flags := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := flags.String("dir", demo.GoSrc(), "directory whose .go files to rank the identifiers of")
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
	rdb, closeRedis, err := demo.Connect(cmd == "local")
	if err != nil {
		return nil, err
	}
	defer closeRedis()
	if cmd == "local" {
		stopWorker, err := demo.Worker(rdb, queue, steps.All...)
		if err != nil {
			return nil, err
		}
		defer stopWorker()
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
	files, err := demo.GoFiles(dir)
	paths := make([]string, len(files))
	for i, f := range files {
		paths[i] = f.Path
	}
	return paths, err
}
