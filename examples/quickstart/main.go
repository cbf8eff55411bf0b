// Command quickstart runs a worker and a Map in one process. With REDIS_URL
// unset it starts an embedded Redis (miniredis) in-process, so it needs no
// set-up; with REDIS_URL set it uses that server.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/redmap/redmap/connect"

	"github.com/alicebob/miniredis/v2"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/manager"
	"github.com/redmap/redmap/worker"
)

// Greet is registered on the worker and called through the manager; both
// sides share this one definition.
var Greet = redmap.Func("greet", func(_ context.Context, name string) (string, error) {
	return "hello, " + strings.ToUpper(name[:1]) + name[1:], nil
})

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "quickstart:", err)
		os.Exit(1)
	}
}

func run() error {
	url := os.Getenv("REDIS_URL")
	if url != "" {
		fmt.Println("using Redis at", connect.Redact(url))
	} else {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		url = "redis://" + mr.Addr()
		fmt.Println("using an embedded Redis (miniredis); set REDIS_URL to use a real one")
	}
	// go-redis logs its dial retries on stderr by itself; through slog at
	// debug level they stay out of the way: redmap's own errors say what failed.
	connect.RouteLogs(slog.New(slog.NewTextHandler(os.Stderr, nil)))
	rdb, err := connect.URL(url)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	defer rdb.Close()

	queue := fmt.Sprintf("quickstart-%d", os.Getpid()) // a queue of its own
	w, err := worker.New(rdb, worker.Options{Queue: queue, Concurrency: 4})
	if err != nil {
		return err
	}
	if err := w.Register(Greet); err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	ran := make(chan error, 1)
	go func() { ran <- w.Run(ctx) }()

	m, err := manager.New(rdb, manager.Options{Queue: queue})
	if err != nil {
		return err
	}
	names := []string{"ada", "grace", "edsger", "barbara", "ken"}
	greetings, err := manager.Map(context.Background(), m, Greet, names, manager.ChunkSize(1))
	if err != nil {
		return err
	}
	for _, g := range greetings {
		fmt.Println(g)
	}
	if err := m.Close(); err != nil {
		return err
	}
	stop()
	return <-ran
}
