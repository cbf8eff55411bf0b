// Command wordcount counts the words of every .go file under a directory
// with manager.MapReduce: the manager sends groups of paths, the workers read
// and count the files and merge the counts of each chunk they run, and only
// those merged counts travel back through Redis.
//
//	go run ./examples/wordcount                          # one process, embedded Redis
//	go run ./examples/wordcount worker [-concurrency N]  # a worker process (REDIS_URL)
//	go run ./examples/wordcount manager [-dir D]         # the manager (REDIS_URL)
//	go run ./examples/wordcount sequential [-dir D]      # the same count, in one goroutine
//
// A word is a maximal run of ASCII letters, digits and '_'. The default
// directory is the Go toolchain's own source tree, $(go env GOROOT)/src. The
// output is the 20 most frequent words, one "WORD COUNT" pair per line, then
// "total W words, D distinct, F files". The worker reads the files itself,
// so workers on other machines need the same tree at the same path.
package main

import (
	"cmp"
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
	"github.com/redmap/redmap/examples/wordcount/count"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/otlp"
)

func main() {
	demo.Main("wordcount", usage, []string{"local", "manager", "sequential"}, runManager, count.Files, count.Merge)
}

const usage = "usage: wordcount [local|manager|sequential] [-dir D] [-queue Q] [-groups G] | wordcount worker [worker flags]"

func runManager(cmd string, args []string) error {
	flags := flag.NewFlagSet(cmd, flag.ContinueOnError)
	dir := flags.String("dir", demo.GoSrc(), "directory whose .go files to count")
	queue := flags.String("queue", "wordcount", "queue to submit to")
	groups := flags.Int("groups", 8, "number of groups of files to send: a few per worker slot")
	flags.IntVar(&chunk, "chunk", 1, "groups per task: a worker merges the counts of a task's groups before they travel")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if flags.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", flags.Arg(0), usage)
	}
	files, err := demo.GoFiles(*dir)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	var counts count.Counts
	switch cmd {
	case "sequential":
		counts = make(count.Counts)
		for _, f := range files {
			b, err := os.ReadFile(f.Path)
			if err != nil {
				return err
			}
			count.Words(b, counts)
		}
	default:
		counts, err = mapReduce(ctx, cmd, *queue, group(files, *groups))
		if err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "counted in %v\n", time.Since(start).Round(time.Millisecond))
	report(counts, len(files))
	return nil
}

// mapReduce counts the groups' words on the queue's workers: REDIS_URL's (or,
// local with REDIS_URL unset, an embedded Redis with a worker in this
// process).
func mapReduce(ctx context.Context, cmd, queue string, groups [][]string) (count.Counts, error) {
	// Spans go to an OTLP endpoint if OTEL_EXPORTER_OTLP_ENDPOINT names
	// one (README "Tracing"); otherwise nothing is traced.
	stopTracing, err := otlp.Setup(context.Background(), "wordcount")
	if err != nil {
		return nil, err
	}
	defer stopTracing(context.Background())
	rdb, closeRedis, err := demo.Connect(cmd == "local")
	if err != nil {
		return nil, err
	}
	defer closeRedis()
	if cmd == "local" {
		stopWorker, err := demo.Worker(rdb, queue, count.Files, count.Merge)
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
	return manager.MapReduce(ctx, m, count.Files, count.Merge, groups, manager.ChunkSize(chunk))
}

// chunk is the number of groups in one task.
var chunk int

// group deals files into at most n groups of about equal bytes, largest
// first, so that no group is a straggler.
func group(files []demo.File, n int) [][]string {
	n = max(1, min(n, len(files)))
	sorted := slices.Clone(files)
	slices.SortFunc(sorted, func(a, b demo.File) int { return cmp.Compare(b.Size, a.Size) })
	groups := make([][]string, n)
	sizes := make([]int64, n)
	for _, f := range sorted {
		i := slices.Index(sizes, slices.Min(sizes))
		groups[i] = append(groups[i], f.Path)
		sizes[i] += f.Size
	}
	return slices.DeleteFunc(groups, func(g []string) bool { return len(g) == 0 })
}

// report prints the 20 most frequent words and the totals.
func report(counts count.Counts, files int) {
	type wc struct {
		word string
		n    int
	}
	all := make([]wc, 0, len(counts))
	total := 0
	for w, n := range counts {
		all = append(all, wc{w, n})
		total += n
	}
	slices.SortFunc(all, func(a, b wc) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.word, b.word)
	})
	for _, x := range all[:min(20, len(all))] {
		fmt.Println(x.word, x.n)
	}
	fmt.Printf("total %d words, %d distinct, %d files\n", total, len(counts), files)
}
