package worker

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redmap/redmap/connect"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redmap/redmap"
)

// Main is a complete worker program serving hs, in a few lines:
//
//	func main() {
//		if err := worker.Main(os.Args[1:], tasks.Square, tasks.Score); err != nil {
//			fmt.Fprintln(os.Stderr, err)
//			os.Exit(1)
//		}
//	}
//
// Flags (each also read from the environment variable named): -redis
// (REDIS_URL, default redis://127.0.0.1:6379/0), -queue (REDMAP_QUEUE, default
// "default"), -id (REDMAP_WORKER_ID), -concurrency (REDMAP_CONCURRENCY), -prefetch (REDMAP_PREFETCH),
// -cache-bytes (REDMAP_CACHE_BYTES), -metrics (REDMAP_METRICS: an address to
// serve Prometheus metrics on at /metrics; off if empty), -log-level
// (REDMAP_LOG_LEVEL: debug, info, warn or error; default info).
//
// With -h it prints its usage on stdout and returns nil. A bad flag, a stray
// argument or a malformed environment variable is an error, printed by no one
// but the caller.
//
// It prints "worker <id>" (and "metrics <address>") on stdout, logs to stderr,
// and serves until SIGINT or SIGTERM; then it stops taking tasks, finishes
// those it runs, gives back prefetched ones and returns nil. A second signal
// exits at once with status 1. An operator's drain (redmap drain) ends it the
// same way. Redis errors are retried with backoff.
func Main(args []string, hs ...redmap.AnyHandle) error {
	return mainWith(args, os.Stdout, os.Stderr, hs...)
}

func mainWith(args []string, stdout, stderr io.Writer, hs ...redmap.AnyHandle) error {
	env := func(name, def string) string {
		if v := os.Getenv(name); v != "" {
			return v
		}
		return def
	}
	var envErr error
	envInt := func(name string) int64 {
		v := os.Getenv(name)
		if v == "" {
			return 0
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil && envErr == nil {
			envErr = fmt.Errorf("worker: %s=%q: want an integer", name, v)
		}
		return n
	}
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	// The flag package would print a bad flag's error and the usage, and the
	// caller would print the error again: it is said once, by the caller.
	fs.SetOutput(io.Discard)
	url := fs.String("redis", env("REDIS_URL", "redis://127.0.0.1:6379/0"), "Redis URL: one server, a Cluster, Sentinel, TLS, ACL users; see connect.URL (env REDIS_URL)")
	queue := fs.String("queue", env("REDMAP_QUEUE", "default"), "queue to serve (env REDMAP_QUEUE)")
	id := fs.String("id", env("REDMAP_WORKER_ID", ""), "worker id, default random (env REDMAP_WORKER_ID)")
	concurrency := fs.Int("concurrency", int(envInt("REDMAP_CONCURRENCY")), "tasks run at once, 0 for GOMAXPROCS (env REDMAP_CONCURRENCY)")
	prefetch := fs.Int("prefetch", int(envInt("REDMAP_PREFETCH")), "tasks taken beyond the free slots, 0 for 16 per slot, -1 for none: lower it for long tasks, so workers share them evenly (env REDMAP_PREFETCH)")
	cacheBytes := fs.Int64("cache-bytes", envInt("REDMAP_CACHE_BYTES"), "bound of the constant cache in bytes, 0 for 512 MiB (env REDMAP_CACHE_BYTES)")
	metricsAddr := fs.String("metrics", env("REDMAP_METRICS", ""), "address to serve Prometheus metrics on, empty for none (env REDMAP_METRICS)")
	logLevel := fs.String("log-level", env("REDMAP_LOG_LEVEL", "info"), "debug, info, warn or error (env REDMAP_LOG_LEVEL)")
	if envErr != nil {
		return envErr
	}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: %s [flags]\n\nA redmap worker serving %s. Flags, each also read from the environment\nvariable named:\n", os.Args[0], handleNames(hs))
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil
	}
	if err != nil {
		return fmt.Errorf("worker: %v (-h lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("worker: unexpected argument %q: flags must come before it, and a worker takes no other arguments (-h lists the flags)", fs.Arg(0))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("worker: -log-level %q: want debug, info, warn or error", *logLevel)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))
	connect.RouteLogs(log)
	client, err := connect.URL(*url)
	if err != nil {
		return fmt.Errorf("worker: -redis: %w", err)
	}
	defer client.Close()
	w, err := New(client, Options{Queue: *queue, ID: *id, Concurrency: *concurrency, Prefetch: *prefetch, CacheBytes: *cacheBytes, Logger: log})
	if err != nil {
		return err
	}
	if err := w.Register(hs...); err != nil {
		return err
	}

	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("worker: -metrics: %w", err)
		}
		reg := prometheus.NewRegistry()
		reg.MustRegister(w.Collector())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		served := make(chan error, 1)
		go func() { served <- srv.Serve(ln) }()
		defer func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			srv.Shutdown(ctx)
			if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Warn("metrics server", "err", err)
			}
		}()
		fmt.Fprintln(stdout, "metrics", ln.Addr())
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case s := <-sigs:
			log.Info("stopping: finishing running tasks; signal again to exit at once", "signal", s.String())
			stop()
		case <-done:
			return
		}
		select {
		case <-sigs:
			log.Warn("second signal: exiting at once")
			os.Exit(1)
		case <-done:
		}
	}()

	// A Redis that is not there, or that refuses redmap, ends the program
	// with one line after a few seconds, rather than a worker that retries
	// for ever having never served.
	if err := w.source.first.Preflight(ctx, startBudget, healBudget, log); err != nil {
		return fmt.Errorf("worker: cannot serve queue %q with Redis at %s: %w", *queue, connect.Redact(*url), err)
	}
	w.checked = true // one start-up check per process
	fmt.Fprintln(stdout, "worker", w.ID())
	log.Info("worker started", "id", w.ID(), "queue", *queue, "concurrency", w.opts.Concurrency)
	return w.Run(ctx)
}

// handleNames lists the functions a worker program serves, for its usage.
func handleNames(hs []redmap.AnyHandle) string {
	names := make([]string, 0, len(hs))
	for _, h := range hs {
		if h != nil {
			names = append(names, strconv.Quote(h.Name()))
		}
	}
	return strings.Join(names, ", ")
}

// startBudget bounds how long worker.Main waits for Redis to answer at start;
// healBudget, how long it waits for a Redis that answers but cannot serve
// yet (a Cluster failing over or still forming: see rdb.Preflight).
const (
	startBudget = 5 * time.Second
	healBudget  = 30 * time.Second
)
