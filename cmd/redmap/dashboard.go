package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap/dashboard"
)

// serveDashboard serves the dashboard on addr until SIGINT or SIGTERM. It
// prints "dashboard http://<address>/" once it listens (the address the
// system gave, for -addr 127.0.0.1:0).
func serveDashboard(client redis.UniversalClient, prefix, queue, addr string, actions bool, out io.Writer) (int, error) {
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	d, err := dashboard.New(client, dashboard.Options{Prefix: prefix, Queue: queue, Actions: actions, Logger: log})
	if err != nil {
		return 2, usageError{err.Error()}
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return 1, fmt.Errorf("dashboard: %w", err)
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	fmt.Fprintf(out, "dashboard http://%s/\n", ln.Addr())
	if actions {
		log.Warn("actions are on: anyone who can reach the page can drain workers, cancel batches and purge queues", "addr", ln.Addr().String())
	}
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return 1, fmt.Errorf("dashboard: %w", err)
	}
	return 0, nil
}
