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
	promcollectors "github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/buildinfo"
	"github.com/redmap/redmap/internal/tracing"
	"github.com/redmap/redmap/otlp"
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
// "default"), -id (REDMAP_WORKER_ID), -name (REDMAP_WORKER_NAME, else
// POD_NAME: the worker label of its metrics; default the host name), -concurrency (REDMAP_CONCURRENCY), -prefetch (REDMAP_PREFETCH),
// -cache-bytes (REDMAP_CACHE_BYTES), -grace (REDMAP_GRACE: how long running
// tasks may finish at a stop, default 20s; see Options.Grace),
// -abandon-grace (REDMAP_ABANDON_GRACE, default 1s: how long past its
// timeout, or its task's cancellation, a function that ignores its context
// is waited for before the call is abandoned; see Options.AbandonGrace),
// -max-abandoned (REDMAP_MAX_ABANDONED, default 3: how many abandoned calls
// may be running before the worker drains and Main returns an error
// wrapping ErrAbandoned, so that the program exits 1 for its supervisor to
// restart it; see Options.MaxAbandoned), -metrics
// (REDMAP_METRICS: an address to serve Prometheus metrics on at /metrics,
// and the probes /healthz (Worker.Healthy) and /readyz (Worker.Ready); off if
// empty), -log-level
// (REDMAP_LOG_LEVEL: debug, info, warn or error; default info). With
// OTEL_EXPORTER_OTLP_ENDPOINT set it exports its task spans over OTLP/HTTP
// (package otlp); without, it installs no tracer.
//
// With -h it prints its usage on stdout and returns nil. A bad flag, a stray
// argument or a malformed environment variable is an error, printed by no one
// but the caller.
//
// It prints "worker <id>" (and "metrics <address>") on stdout, logs to stderr,
// and serves until SIGINT or SIGTERM; then it stops taking tasks, gives back
// prefetched ones, finishes those it runs within -grace, gives back to the
// queue at once those still running then, and returns nil. A second signal
// exits at once with status 1. An operator's drain (redmap drain) ends it the
// same way. Redis errors are retried with backoff.
func Main(args []string, hs ...redmap.AnyHandle) error {
	return mainWith(args, os.Stdout, os.Stderr, hs...)
}

func mainWith(args []string, stdout, stderr io.Writer, hs ...redmap.AnyHandle) error {
	f, err := parseFlags(args, stdout, hs)
	if err != nil || f == nil {
		return err // nil after -h
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: f.level}))
	connect.RouteLogs(log)
	// The process's default logger is the worker's, so that a function's
	// slog.InfoContext(ctx, ...) lines carry the task's trace ids too.
	slog.SetDefault(slog.New(tracing.LogHandler(log.Handler())))
	shutdown, err := otlp.Setup(context.Background(), "redmap-worker")
	if err != nil {
		return fmt.Errorf("worker: tracing: %w", err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := shutdown(ctx); err != nil {
			log.Warn("could not export the last spans", "err", err)
		}
	}()
	client, err := connect.URL(f.url.URL)
	if err != nil {
		return fmt.Errorf("worker: -redis: %w", err)
	}
	defer client.Close()
	w, err := New(client, Options{Queue: f.queue, ID: f.id, Name: f.name, Concurrency: f.concurrency, Prefetch: f.prefetch, CacheBytes: f.cacheBytes, Grace: f.grace,
		AbandonGrace: f.abandonGrace, MaxAbandoned: f.maxAbandoned, Logger: log})
	if err != nil {
		return err
	}
	if err := w.Register(hs...); err != nil {
		return err
	}
	if f.metrics != "" {
		stopMetrics, err := serveMetrics(f.metrics, w, stdout, log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	ctx, stop := onSignals(log)
	defer stop()
	// A Redis that is not there, or that refuses redmap, ends the program
	// with one line after a few seconds, rather than a worker that retries
	// for ever having never served.
	if err := w.source.first.Preflight(ctx, &broker.PreflightParams{Budget: startBudget, Heal: healBudget, Log: log}); err != nil {
		return fmt.Errorf("worker: cannot serve queue %q with Redis at %s: %w", f.queue, f.url.String(), err)
	}
	w.checked = true // one start-up check per process
	fmt.Fprintln(stdout, "worker", w.ID())
	f.announce(log, w.ID(), w.opts.Concurrency)
	return w.Run(ctx)
}

// announce logs where the worker serves: its id, queue, concurrency, the
// Redis it connected to (redacted) and its program's version, with a warning for each of the Redis
// and the queue that is the built-in default rather than one the operator
// named: a newcomer's worker must not serve someone else's Redis unseen.
func (f *flags) announce(log *slog.Logger, id string, concurrency int) {
	log.Info("worker started", "id", id, "queue", f.queue, "concurrency", concurrency, "redis", f.url.String(),
		"version", buildinfo.Version())
	if f.redisDefault {
		log.Warn("no -redis and no REDIS_URL: serving the built-in default " + f.url.String() + "; set REDIS_URL to the Redis your managers use")
	}
	if f.queueDefault {
		log.Warn(`no -queue and no REDMAP_QUEUE: serving the queue "default"; a manager's batches reach this worker only if it submits to that queue`)
	}
}

// flags are a worker program's settings, from its flags and environment.
type flags struct {
	url                      connect.URLFlag // -h shows it without its password
	queue, id, name, metrics string
	concurrency, prefetch    int
	cacheBytes               int64
	grace, abandonGrace      time.Duration
	maxAbandoned             int
	level                    slog.Level
	queueDefault             bool // neither -queue nor REDMAP_QUEUE named the queue
	redisDefault             bool // neither -redis nor REDIS_URL named the Redis
}

// parseFlags reads args and the environment; with -h it prints the usage
// on stdout and returns nil flags and no error.
func parseFlags(args []string, stdout io.Writer, hs []redmap.AnyHandle) (*flags, error) {
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
	var f flags
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	// The flag package would print a bad flag's error and the usage, and the
	// caller would print the error again: it is said once, by the caller.
	fs.SetOutput(io.Discard)
	f.url.URL = env("REDIS_URL", "redis://127.0.0.1:6379/0")
	fs.Var(&f.url, "redis", "Redis URL: one server, a Cluster, Sentinel, TLS, ACL users; see connect.URL (env REDIS_URL)")
	fs.StringVar(&f.queue, "queue", env("REDMAP_QUEUE", "default"), "queue to serve (env REDMAP_QUEUE)")
	fs.StringVar(&f.id, "id", env("REDMAP_WORKER_ID", ""), "worker id, default random (env REDMAP_WORKER_ID)")
	fs.StringVar(&f.name, "name", env("REDMAP_WORKER_NAME", env("POD_NAME", "")), "the worker's stable name, the worker label of its metrics, default the host name (env REDMAP_WORKER_NAME, else POD_NAME)")
	fs.IntVar(&f.concurrency, "concurrency", int(envInt("REDMAP_CONCURRENCY")), "tasks run at once, 0 for GOMAXPROCS (env REDMAP_CONCURRENCY)")
	fs.IntVar(&f.prefetch, "prefetch", int(envInt("REDMAP_PREFETCH")), "tasks taken beyond the free slots, 0 for 64 per slot, -1 for none: lower it for long tasks, so workers share them evenly (env REDMAP_PREFETCH)")
	fs.Int64Var(&f.cacheBytes, "cache-bytes", envInt("REDMAP_CACHE_BYTES"), "bound of the constant cache in bytes, 0 for 512 MiB (env REDMAP_CACHE_BYTES)")
	grace := env("REDMAP_GRACE", DefaultGrace.String())
	fs.StringVar(&grace, "grace", grace, "how long running tasks may finish once the worker is told to stop (SIGTERM, drain); those still running then go back to the queue at once, for another worker; -1s waits for ever (env REDMAP_GRACE)")
	abandon := env("REDMAP_ABANDON_GRACE", DefaultAbandonGrace.String())
	fs.StringVar(&abandon, "abandon-grace", abandon, "how long past its timeout, or its task's cancellation, a function that ignores its context is waited for; then the call is abandoned (left running, its result dropped) and its element fails with ErrTimeout, or its slot goes to the next task; -1s never abandons (env REDMAP_ABANDON_GRACE)")
	fs.IntVar(&f.maxAbandoned, "max-abandoned", int(envInt("REDMAP_MAX_ABANDONED")), "abandoned calls that may be running before the worker drains and exits with status 1 for its supervisor to restart it, 0 for 3, -1 for no limit (env REDMAP_MAX_ABANDONED)")
	fs.StringVar(&f.metrics, "metrics", env("REDMAP_METRICS", ""), "address to serve Prometheus metrics on (/metrics) and the probes /healthz and /readyz, empty for none (env REDMAP_METRICS)")
	logLevel := fs.String("log-level", env("REDMAP_LOG_LEVEL", "info"), "debug, info, warn or error (env REDMAP_LOG_LEVEL)")
	if envErr != nil {
		return nil, envErr
	}
	err := fs.Parse(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintf(stdout, "Usage: %s [flags]\n\nA redmap worker serving %s. Flags, each also read from the environment\nvariable named:\n", os.Args[0], handleNames(hs))
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("worker: %v (-h lists the flags)", err)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("worker: unexpected argument %q: flags must come before it, and a worker takes no other arguments (-h lists the flags)", fs.Arg(0))
	}
	if f.grace, err = time.ParseDuration(grace); err != nil || f.grace < -time.Second {
		return nil, fmt.Errorf("worker: -grace %q: want a duration such as 20s (-1s waits for ever)", grace)
	}
	if f.grace < 0 {
		f.grace = -1
	} else if f.grace == 0 {
		f.grace = time.Nanosecond // no grace: give back at once; 0 would mean the default
	}
	if f.abandonGrace, err = time.ParseDuration(abandon); err != nil || f.abandonGrace <= 0 && f.abandonGrace != -time.Second {
		return nil, fmt.Errorf("worker: -abandon-grace %q: want a positive duration such as 1s (-1s never abandons)", abandon)
	}
	if f.abandonGrace < 0 {
		f.abandonGrace = -1
	}
	if err := f.level.UnmarshalText([]byte(*logLevel)); err != nil {
		return nil, fmt.Errorf("worker: -log-level %q: want debug, info, warn or error", *logLevel)
	}
	f.queueDefault = os.Getenv("REDMAP_QUEUE") == ""
	f.redisDefault = os.Getenv("REDIS_URL") == ""
	fs.Visit(func(fl *flag.Flag) {
		f.queueDefault = f.queueDefault && fl.Name != "queue"
		f.redisDefault = f.redisDefault && fl.Name != "redis"
	})
	return &f, nil
}

// serveMetrics serves w's Prometheus metrics on addr at /metrics, and says
// where on stdout; stop shuts the server down.
func serveMetrics(addr string, w *Worker, stdout io.Writer, log *slog.Logger) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("worker: -metrics: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(w.Collector(), buildinfo.Collector(), promcollectors.NewGoCollector(), promcollectors.NewProcessCollector(promcollectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.Handle("/healthz", probe(w.Healthy))
	mux.Handle("/readyz", probe(w.Ready))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	fmt.Fprintln(stdout, "metrics", ln.Addr())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		if err := <-served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Warn("metrics server", "err", err)
		}
	}, nil
}

// onSignals returns a context that ends at SIGINT or SIGTERM; a second
// signal exits at once with status 1. stop stops listening.
func onSignals(log *slog.Logger) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case s := <-sigs:
			log.Info("stopping: finishing running tasks; signal again to exit at once", "signal", s.String())
			cancel()
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
	return ctx, func() {
		signal.Stop(sigs)
		close(done)
		cancel()
	}
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
// yet (a Cluster failing over or still forming: see redisbroker.Preflight).
const (
	startBudget = 5 * time.Second
	healBudget  = 30 * time.Second
)
