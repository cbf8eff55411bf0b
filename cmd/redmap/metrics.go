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
	"time"
)

// serveMetrics serves Prometheus metrics of the queues (-queue, or every
// queue) at /metrics on addr until SIGINT or SIGTERM, read through the
// inspector from the records in Redis at each scrape: they exist with no
// worker running, which is what scaling from zero needs. It serves the
// probes /healthz (the process serves: liveness, never Redis) and /readyz
// (Redis answers a PING within 2 s: readiness) beside it. It prints
// "metrics http://<address>/metrics" once it listens.
func serveMetrics(c *cli, addr string, out io.Writer) (int, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return 1, fmt.Errorf("metrics: %w", err)
	}
	mux := http.NewServeMux()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	mux.Handle("GET /metrics", c.in.WithLogger(log).MetricsHandler(c.queues))
	// Alive is only "this process serves HTTP": a Redis that is down does
	// not make it unhealthy, since a restart would not bring Redis back and
	// would only lose the scrapes in between. Ready is "it can read Redis".
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		defer cancel()
		if err := c.in.Ping(ctx); err != nil {
			http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	})
	srv := dashboardServer(mux) // its timeouts
	defer shutdownOnSignal(srv)()
	fmt.Fprintf(out, "metrics http://%s/metrics\n", ln.Addr())
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return 1, fmt.Errorf("metrics: %w", err)
	}
	return 0, nil
}

// backlog prints the tasks waiting and running in each queue (-queue, or
// every queue): with -queue, the number alone, for scripts; else a line
// "<queue> <tasks>" each. With -json, each queue's inspect.Metrics.
func (c *cli) backlog(ctx context.Context) error {
	qs, err := c.queues(ctx)
	if err != nil {
		return err
	}
	var all []any
	for _, q := range qs {
		m, err := c.in.Metrics(ctx, q)
		if err != nil {
			return err
		}
		switch {
		case c.json:
			all = append(all, m)
		case c.queue != "":
			fmt.Fprintln(c.out, m.WaitingTasks+m.RunningTasks)
		default:
			fmt.Fprintln(c.out, printable(q), m.WaitingTasks+m.RunningTasks)
		}
	}
	if c.json {
		return c.emit(orEmpty(all))
	}
	return nil
}
