// Package worker runs redmap tasks: a Worker registers functions by name and
// serves one queue, taking tasks from its private list first and then from the
// public list, until its context ends.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/handler"
	"github.com/redmap/redmap/internal/rdb"
)

// Worker runs the tasks of one queue. Build it with New, register functions
// with Handle, then call Run.
//
// Run wires four parts, each in its own file with one lifecycle (start, stop,
// wait): the fetcher takes tasks, the executors run them, the finisher
// reports their results, and the maintainer keeps the worker in good
// standing. The ledger of held tasks (held) is what they share.
type Worker struct {
	rdb       *rdb.RDB // shard 0's: where the queue-wide records live
	client    redis.UniversalClient
	shardMu   sync.Mutex                 // serialises growth of shardList
	shardList atomic.Pointer[[]*rdb.RDB] // the queue's shards the worker serves; it only grows
	opts      Options
	memo      *cache.Memo
	log       *slog.Logger

	mu       sync.RWMutex
	handlers map[string]handler.Runtime
	running  atomic.Bool

	held      *held
	failures  failureLog
	counters  counters
	started   time.Time
	duration  prometheus.Histogram // seconds per task run
	draining  atomic.Bool          // the fetcher stopped: the worker takes no more tasks
	taskTimes taskTimes            // how long tasks run, for prefetch

	mismatches sync.Map // manager signature -> how it differs from the worker's handle

	problemMu   sync.Mutex
	problemText string // the last failed Redis call, for operators; "" when all is well

	checked bool  // worker.Main ran the start-up check: Run does not again
	hooks   hooks // set by tests before Run; all zero otherwise
}

// hooks are what a test of the package injects into a worker's parts, set
// before Run. Each is nil (or false) in use.
type hooks struct {
	emptying func()           // the fetcher begins to wait for the worker to hold nothing
	finish   func([]rdb.Done) // a batch of results is about to be reported
	suspect  func(rdb.Taken)  // a suspect starts, holding the executors alone
	checkAll bool             // check every prefetched task still wanted, however short its wait
}

// New returns a worker of client for opts.Queue. It validates opts and returns
// an error naming the first bad field. It sends no command.
func New(client redis.UniversalClient, opts Options) (*Worker, error) {
	if client == nil {
		return nil, errors.New("worker: nil Redis client")
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	w := &Worker{
		rdb:      rdb.New(client, opts.Prefix, opts.Queue),
		client:   client,
		opts:     opts,
		memo:     cache.NewMemo(cache.NewStore(client, opts.Prefix, 0), opts.CacheBytes),
		log:      opts.Logger.With("worker", opts.ID, "queue", opts.Queue),
		handlers: make(map[string]handler.Runtime),
		held:     newHeld(),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redmap_worker_task_duration_seconds", Help: "Time spent running one task (all its elements).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
	}
	w.shardList.Store(&[]*rdb.RDB{w.rdb})
	return w, nil
}

// shards returns the queue's shards the worker serves: one, until a
// heartbeat learns that managers spread the queue over more
// (manager.Options.Shards).
func (w *Worker) shards() []*rdb.RDB { return *w.shardList.Load() }

// shard returns shard i, which the worker serves.
func (w *Worker) shard(i int) *rdb.RDB { return w.shards()[i] }

// grow makes the worker serve every shard the queue's list of shard names
// names, if it knows that there are n shards and serves fewer: one LRANGE.
// It keeps the shards it serves (a name Redis lost stays served).
func (w *Worker) grow(ctx context.Context, n int) {
	if n <= len(w.shards()) {
		return
	}
	w.shardMu.Lock()
	defer w.shardMu.Unlock()
	old := w.shards()
	if n <= len(old) {
		return
	}
	names, err := w.rdb.ShardNames(ctx)
	if err != nil {
		w.failed("read the queue's shard names", err)
		return
	}
	grown := slices.Clip(old)
	for _, name := range names {
		if !slices.ContainsFunc(grown, func(r *rdb.RDB) bool { return r.Name() == name }) {
			grown = append(grown, rdb.NewShard(w.client, w.opts.Prefix, name, len(grown)))
		}
	}
	w.rdb.SawShards(len(grown))
	if len(grown) > len(old) {
		w.shardList.Store(&grown)
		w.log.Info("serving more shards of the queue, as its managers spread tasks over them", "shards", len(grown))
	}
}

// CacheStats returns the counters of the worker's memo of constant data:
// hits, misses, fetches, bytes fetched, decodes, evictions.
func (w *Worker) CacheStats() cache.Stats { return w.memo.Stats() }

// ID returns the worker's id, which managers pass to manager.OnWorker.
func (w *Worker) ID() string { return w.opts.ID }

// Handle registers functions; the worker runs only names it registered. A name
// registered twice (ErrDuplicateFunc), an invalid handle, or a call after Run
// started is an error, and then none of hs is registered.
func (w *Worker) Handle(hs ...redmap.Handler) error {
	if w.running.Load() {
		return errors.New("worker: Handle called after Run")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	seen := make(map[string]bool, len(hs))
	for _, h := range hs {
		if h == nil {
			return errors.New("worker: nil handler")
		}
		if err := h.Validate(); err != nil {
			return err
		}
		if _, dup := w.handlers[h.Name()]; dup || seen[h.Name()] {
			return fmt.Errorf("%w: %q", redmap.ErrDuplicateFunc, h.Name())
		}
		seen[h.Name()] = true
	}
	for _, h := range hs {
		rt, _ := handler.Of(h)
		w.handlers[h.Name()] = rt
	}
	return nil
}

func (w *Worker) handler(name string) handler.Runtime {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.handlers[name]
}

// Run serves the queue until ctx ends, then stops taking tasks, finishes and
// reports the ones it runs, gives prefetched ones back to the queue, retires
// (tasks left in its private queue fail with ErrLost: no other worker may run
// them), and returns nil. Redis errors are logged and retried with backoff;
// they do not end Run, except that if Redis refuses a command the worker
// needs at the start (an ACL without it), Run returns that
// *redmap.CommandError having taken nothing. A worker runs once.
//
// Every Heartbeat it renews its lease, reaps workers whose lease expired
// (their tasks go back to the queue), and cancels the context of running
// tasks whose batch was cancelled.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	w.started = time.Now()
	// Tasks run, and results are reported, detached from ctx: when ctx ends,
	// the worker drains what it holds instead of abandoning it.
	bg := context.WithoutCancel(ctx)
	capacity := w.opts.Concurrency + w.opts.Prefetch
	s := newSlots(func() int { return w.opts.Concurrency + w.prefetch() })
	fetch := newFetcher(w, ctx, bg, s, capacity)
	upkeep := newMaintainer(w, fetch.stop)
	finish := newFinisher(w, capacity)
	exec := newExecutors(w, fetch.jobs, finish.results, s, fetch.stopped)

	// Register before the first take, so that a worker killed at any instant
	// after taking is in the workers set for the reap to find; and fail at
	// once, having taken nothing, if Redis refuses what the worker needs.
	// worker.Main checks with its budgets just before: once is enough.
	if !w.checked {
		if err := w.rdb.Preflight(ctx, 0, 0, w.log); err != nil && rdb.Refused(err) {
			return fmt.Errorf("worker: cannot serve queue %q: %w", w.opts.Queue, err)
		}
	}
	if err := upkeep.tick(bg); err != nil && rdb.Refused(err) {
		return fmt.Errorf("worker: cannot serve queue %q: %w", w.opts.Queue, err)
	}

	upkeep.start(bg)
	finish.start(bg)
	exec.start(bg, w.opts.Concurrency)
	fetch.start()

	fetch.wait() // ctx ended, or an operator drains the worker
	exec.wait()  // tasks already running finish; prefetched ones are set aside
	finish.stop()
	finish.wait()
	upkeep.stop()
	upkeep.wait()
	w.leave(bg, exec.setAside())
	return nil
}

// leave gives the tasks set aside unrun back to the queue, then retires the
// worker from every shard: its lease ends now, and tasks left in its private
// lists are reported lost to their managers.
func (w *Worker) leave(ctx context.Context, unstarted map[int][]string) {
	for i, members := range unstarted {
		gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		n, err := w.shard(i).GiveBack(gctx, w.opts.ID, members)
		cancel()
		if err != nil {
			w.log.Warn("giving back prefetched tasks failed; they return when the lease expires", "err", err)
		} else {
			w.counters.givenBack.Add(int64(n))
		}
	}
	for _, r := range w.shards() {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if reaped, err := r.Retire(rctx, w.opts.ID); err != nil {
			w.log.Warn("retiring failed; the lease will expire", "err", err)
		} else if reaped.Lost > 0 {
			w.log.Warn("private tasks left unrun were reported lost", "tasks", reaped.Lost)
		}
		cancel()
	}
	w.log.Info("worker stopped")
}

// failed logs a failed Redis call of one of the worker's loops: at error
// level if Redis refused it for good (an ACL that lacks a command, say: it
// will not heal by retrying, and the worker cannot do its part until an
// operator fixes it), else as a warning. Either way the loop retries, and the
// error is published with the worker's info (redmap workers).
func (w *Worker) failed(op string, err error) {
	if rdb.Refused(err) {
		w.log.Error("Redis refused a command the worker needs; retrying until it is allowed", "op", op, "err", err)
	} else {
		w.log.Warn("Redis call failed; retrying", "op", op, "err", err)
	}
	w.setProblem(op + ": " + err.Error())
}

func (w *Worker) setProblem(p string) {
	w.problemMu.Lock()
	w.problemText = p
	w.problemMu.Unlock()
}

// problem returns the last failure of a Redis call, "" once all is well.
func (w *Worker) problem() string {
	w.problemMu.Lock()
	defer w.problemMu.Unlock()
	return w.problemText
}

func (w *Worker) names() []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	names := make([]string, 0, len(w.handlers))
	for n := range w.handlers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
