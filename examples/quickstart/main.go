// Command quickstart runs a worker and a Map in one process. With REDIS_URL
// unset it starts an embedded Redis (miniredis) in-process, so it needs no
// set-up; with REDIS_URL set it uses that server.
//
//	go run ./examples/quickstart
package main

import (
	"context"
	"fmt"
	"github.com/redmap/redmap/internal/id"
	"os"
	"strings"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

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
	opts := &redis.Options{}
	if url := os.Getenv("REDIS_URL"); url != "" {
		var err error
		if opts, err = redis.ParseURL(url); err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		fmt.Println("using Redis at", opts.Addr)
	} else {
		mr, err := miniredis.Run()
		if err != nil {
			return err
		}
		defer mr.Close()
		opts.Addr = mr.Addr()
		fmt.Println("using an embedded Redis (miniredis); set REDIS_URL to use a real one")
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()

	queue := "quickstart-" + id.New()[:8]
	w, err := worker.New(rdb, worker.Options{Queue: queue, Concurrency: 4})
	if err != nil {
		return err
	}
	if err := w.Handle(Greet); err != nil {
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
