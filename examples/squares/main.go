// Command squares runs the squares example as separate worker and manager
// processes on one Redis:
//
//	go run ./examples/squares worker [-queue Q] [-concurrency N]
//	go run ./examples/squares manager -n N [-queue Q]
//
// The worker serves until SIGINT or SIGTERM, then drains and exits 0. The
// manager maps x → x*x over 0..N-1, checks every result and prints as its last
// line "sum <sum of squares> elements <N>"; it exits 1 if any result is wrong
// or missing. Both read REDIS_URL (default redis://127.0.0.1:6379/0).
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"math/big"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/redis/go-redis/v9"
	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"

	"github.com/redmap/redmap/examples/squares/tasks"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/otlp"
	"github.com/redmap/redmap/worker"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "worker":
		if os.Getenv("REDMAP_QUEUE") == "" {
			os.Setenv("REDMAP_QUEUE", "squares") // this example's default queue
		}
		err = runWorker(os.Args[2:])
	case "manager":
		err = runManager(os.Args[2:])
	case "-h", "-help", "--help", "help":
		fmt.Println(usageLine)
		return
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "squares:", err)
		os.Exit(1)
	}
}

const usageLine = "usage: squares worker [-queue Q] [-concurrency N] | squares manager -n N [-queue Q]; squares worker -h lists the worker's flags"

func usage() {
	fmt.Fprintln(os.Stderr, usageLine)
	os.Exit(2)
}

func client() (redis.UniversalClient, error) {
	url := os.Getenv("REDIS_URL")
	if url == "" {
		url = "redis://127.0.0.1:6379/0"
	}
	// go-redis logs its dial retries on stderr by itself; through slog at
	// debug level they stay out of the way: redmap's own errors say what failed.
	connect.RouteLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	c, err := connect.URL(url)
	if err != nil {
		return nil, fmt.Errorf("REDIS_URL: %w", err)
	}
	return c, nil
}

// runWorker is worker.Main's complete worker program: flags (-queue,
// -concurrency, -id, -metrics, -log-level, ...), environment, logs, metrics,
// and a drain on SIGINT or SIGTERM.
func runWorker(args []string) error {
	return worker.Main(args, tasks.Square)
}

func runManager(args []string) error {
	fs := flag.NewFlagSet("manager", flag.ExitOnError)
	queue := fs.String("queue", "squares", "queue to submit to")
	n := fs.Int("n", 1000, "number of elements")
	shards := fs.Int("shards", 1, "shards to spread the queue over (on a Redis Cluster, one master's core each); workers follow")
	fs.Parse(args)

	// Spans go to an OTLP endpoint if OTEL_EXPORTER_OTLP_ENDPOINT names
	// one (README "Tracing"); otherwise nothing is traced.
	stopTracing, err := otlp.Setup(context.Background(), "squares-manager")
	if err != nil {
		return err
	}
	defer stopTracing(context.Background())
	rdb, err := client()
	if err != nil {
		return err
	}
	defer rdb.Close()
	m, err := manager.New(rdb, manager.Options{Queue: *queue, Shards: *shards})
	if err != nil {
		return err
	}
	defer m.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	xs := make([]int, *n)
	for i := range xs {
		xs[i] = i
	}
	batch, err := manager.Submit(ctx, m, tasks.Square, xs)
	if err != nil {
		return err
	}
	showProgress(batch)
	ys, err := batch.Wait(ctx)
	if err != nil {
		return err
	}
	if len(ys) != *n {
		return fmt.Errorf("got %d results, want %d", len(ys), *n)
	}
	// The sum of squares outgrows 64 bits past about three million elements.
	sum, sq := new(big.Int), new(big.Int)
	for i, y := range ys {
		if y != i*i {
			return fmt.Errorf("element %d: got %d, want %d", i, y, i*i)
		}
		sum.Add(sum, sq.SetInt64(int64(y)))
	}
	fmt.Printf("sum %s elements %d\n", sum, *n)
	return nil
}

// showProgress reports a batch's progress on stderr until it is done: a
// progress bar on a terminal, a plain line a second otherwise (logs, CI).
func showProgress(b *manager.Batch[int]) {
	if term.IsTerminal(int(os.Stderr.Fd())) {
		// The rate shown is the batch's since Submit, not the bar's own,
		// which is absurd on its first frame.
		bar := progressbar.NewOptions(b.Len(), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("squares"), progressbar.OptionShowCount(),
			progressbar.OptionThrottle(100*time.Millisecond))
		show := func() {
			p := b.Progress()
			bar.Describe(fmt.Sprintf("squares %.0f elements/s", p.Rate))
			bar.Set(p.Done)
		}
		for {
			select {
			case <-b.Done():
				show()
				bar.Finish()
				fmt.Fprintln(os.Stderr)
				return
			case <-time.After(100 * time.Millisecond):
				show()
			}
		}
	}
	for {
		select {
		case <-b.Done():
			p := b.Progress()
			fmt.Fprintf(os.Stderr, "progress: %d/%d done, %d failed, %.0f elements/s\n", p.Done, p.Total, p.Failed, p.Rate)
			return
		case <-time.After(time.Second):
			p := b.Progress()
			eta := p.ETA.Round(time.Second).String()
			if p.ETA < time.Second {
				eta = "<1s"
			}
			fmt.Fprintf(os.Stderr, "progress: %d/%d done, %d failed, %.0f elements/s, eta %s\n", p.Done, p.Total, p.Failed, p.Rate, eta)
		}
	}
}
