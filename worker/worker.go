// Package worker runs redmap tasks: a Worker registers functions by name and
// serves one queue, taking tasks from its private list first and then from the
// public list, until its context ends.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/trace"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/broker"
	"github.com/redmap/redmap/internal/broker/redisbroker"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/buildinfo"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/failure"
	"github.com/redmap/redmap/internal/gcfloor"
	"github.com/redmap/redmap/internal/memo"
	"github.com/redmap/redmap/internal/part"
	"github.com/redmap/redmap/internal/tracing"
)

// Worker runs the tasks of one queue. Build it with New, register functions
// with Register, then call Run.
//
// Run wires four parts, each in its own file with one lifecycle
// (internal/part: Start, Stop, Wait) and built from a params struct: the
// fetcher takes tasks, the executors run them, the finisher reports their
// results, and the maintainer keeps the worker in good standing. They reach
// Redis through the source (source.go), where the worker's sharding lives;
// the ledger of held tasks (held) is what they share.
type Worker struct {
	workerConfig
	workerFuncs
	workerState
	workerTallies

	source *source
	spill  shuffleRedis // the partitions of a map/reduce by key: the queue's first shard
	memo   *memo.Memo
	held   *held
}

// workerConfig is how a worker is set: written by New (assemble), and by
// Main before Run (checked); read-only after.
type workerConfig struct {
	opts    Options
	log     *slog.Logger
	tracer  trace.Tracer // from Options.TracerProvider or the global one
	checked bool         // worker.Main ran the start-up check: Run does not again
}

// workerFuncs are the functions a worker runs: written by Register, under
// mu, and by Run as it starts (served); read-only after, but mismatches,
// which its executors add to as they resolve tasks (resolve.go).
type workerFuncs struct {
	mu       sync.RWMutex
	runtimes map[string]*engine.Runtime // registered name → its runtime
	limits   map[string]redmap.Limit    // registered name → the limit declared with its handle, if any
	served   []string                   // what it registered, "<name>\t<signature>" each, set by Run
	// mismatches maps a manager's signature to how it differs from the
	// worker's handle.
	mismatches sync.Map
}

// workerState is where a worker stands, for its probes (health.go) and
// operators (info): written by Run and its parts as they go.
type workerState struct {
	started  time.Time
	version  string // its program's build (buildinfo.Version), read once
	running  atomic.Bool
	draining atomic.Bool // the fetcher stopped: the worker takes no more tasks
	// busy is whether the worker ran tasks at its last published info,
	// and since when (info: its state's age for operators).
	busy struct {
		mu    sync.Mutex
		now   bool
		since time.Time
	}
	problem problem
	// For the probes: when the maintainer last ticked, and last renewed
	// the lease, in Unix ns; whether Run returned.
	ticked, renewed atomic.Int64
	ended           atomic.Bool
	// stuck is why the worker leaves: its results could not be reported
	// (see finisher); nil while it serves.
	stuck atomic.Pointer[error]
}

// workerTallies are what a worker counts as it runs tasks, added to by its
// parts: for Stats, for operators and for prefetch.
type workerTallies struct {
	failures  failure.Log
	counters  counters
	abandoned abandoned // calls of functions that ignored their context, left running
	perFunc   perFunc   // tasks and elements run, by function
	taskTimes taskTimes // how long tasks run, for prefetch
}

// problem is the last failed Redis call of a worker's parts, for
// operators; "" when all is well.
type problem struct {
	mu   sync.Mutex
	text string
}

// set records text as the worker's problem ("" for none), and returns the
// one it replaces.
func (p *problem) set(text string) (was string) {
	p.mu.Lock()
	was, p.text = p.text, text
	p.mu.Unlock()
	return was
}

func (p *problem) get() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.text
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
	return assemble(opts, redisbroker.New(client, opts.Prefix, opts.Queue),
		func(name string, i int) broker.Shard { return redisbroker.NewShard(client, opts.Prefix, name, i) },
		memo.New(cache.NewStore(client, opts.Prefix, 0), opts.CacheBytes)), nil
}

// assemble builds a worker over its seam to Redis: shard 0 of its queue, how
// to open the others, and the memo of constants; opts have their defaults.
func assemble(opts Options, first broker.Queue, open func(name string, i int) broker.Shard, memo *memo.Memo) *Worker {
	w := &Worker{
		workerConfig: workerConfig{tracer: tracing.Tracer(opts.TracerProvider), opts: opts,
			log: slog.New(tracing.LogHandler(opts.Logger.Handler())).With("worker", opts.ID, "queue", opts.Queue)},
		workerFuncs:   workerFuncs{runtimes: make(map[string]*engine.Runtime), limits: make(map[string]redmap.Limit)},
		workerTallies: workerTallies{perFunc: newPerFunc()},
		memo:          memo,
		held:          newHeld(),
	}
	w.spill = first
	w.source = newSource(sourceParams{wid: opts.ID, lease: opts.Lease, idleWait: opts.IdleWait,
		first: first, open: open, serves: w.serves, failed: w.failed, log: w.log})
	return w
}

// ProfileLabel is the profiler label (runtime/pprof) on the goroutines of a
// worker's parts, its value the worker's id: a goroutine profile of a
// process running several says whose each is.
const ProfileLabel = "redmap.worker"

// ID returns the worker's id, which managers pass to manager.OnWorker.
func (w *Worker) ID() string { return w.opts.ID }

// Register registers functions; the worker runs only names it registered. A name
// registered twice (ErrDuplicateFunc), an invalid handle, or a call after Run
// started is an error, and then none of hs is registered.
func (w *Worker) Register(hs ...redmap.AnyHandle) error {
	if w.running.Load() {
		return errors.New("worker: Register called after Run")
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
		if _, dup := w.runtimes[h.Name()]; dup || seen[h.Name()] {
			return fmt.Errorf("%w: %q", redmap.ErrDuplicateFunc, h.Name())
		}
		seen[h.Name()] = true
	}
	for _, h := range hs {
		w.runtimes[h.Name()] = h.Runtime()
		w.perFunc.init(h.Name())
		if l := h.Limit(); !l.IsZero() {
			w.limits[h.Name()] = l
		}
	}
	return nil
}

// Run serves the queue until ctx ends, then stops taking tasks, finishes and
// reports the ones it runs, gives prefetched ones back to the queue, retires
// (tasks left in its private queue fail with ErrLost: no other worker may run
// them), and returns nil. It stops so too, and returns an error wrapping
// ErrAbandoned, once Options.MaxAbandoned calls it abandoned (functions
// that ignore their context) are running. Redis errors are logged and retried with backoff;
// they do not end Run, except that if Redis refuses a command the worker
// needs at the start (an ACL without it), Run returns that
// *redmap.CommandError having taken nothing; and if no result could be
// reported for 3 leases while Redis took its heartbeats (a link too slow
// for any finish, a finish Redis refuses), the worker stops renewing its
// lease, so that its tasks are reaped (their attempt counted), leaves as
// above, and returns an error saying why. A worker runs once.
//
// Every Heartbeat it renews its lease, reaps workers whose lease expired
// (their tasks go back to the queue), and cancels the context of running
// tasks whose batch was cancelled.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	w.started, w.version = time.Now(), buildinfo.Version()
	w.served = w.registered()
	defer gcfloor.Hold(w.gcHeadroom())()
	// Tasks run, and results are reported, detached from ctx: when ctx ends,
	// the worker drains what it holds instead of abandoning it.
	// Its parts' goroutines carry the label redmap.worker=<id> in a
	// goroutine profile (internal/part).
	ctx = pprof.WithLabels(ctx, pprof.Labels(ProfileLabel, w.opts.ID))
	bg := context.WithoutCancel(ctx)
	p := w.parts()

	// Register before the first take, so that a worker killed at any instant
	// after taking is in the workers set for the reap to find; and fail at
	// once, having taken nothing, if Redis refuses what the worker needs.
	// worker.Main checks with its budgets just before: once is enough.
	if !w.checked {
		if err := w.source.first.Preflight(ctx, &broker.PreflightParams{Log: w.log}); err != nil && broker.Refused(err) {
			return fmt.Errorf("worker: cannot serve queue %q: %w", w.opts.Queue, err)
		}
	}
	// The types go first: a manager that sees this worker registered with
	// other signatures than its own then finds them, to name the field
	// that differs (ErrTypeMismatch).
	w.publishTypes(ctx)
	if err := p.upkeep.tick(bg); err != nil && broker.Refused(err) {
		return fmt.Errorf("worker: cannot serve queue %q: %w", w.opts.Queue, err)
	}

	w.declareLimits(ctx)
	p.fed().Start(bg)
	// The fetcher runs under ctx itself, not stopped by a callback when ctx
	// ends: a callback runs on a goroutine of its own, and in the moment
	// before it does, a slot freed by a task that ended could take another
	// task after Run was told to stop. It stops when ctx ends, or when an
	// operator drains the worker; the others stop after it, in turn: tasks
	// already running finish, prefetched ones are set aside, results are
	// reported.
	p.fetch.Start(ctx)
	p.fetch.Wait()
	// Prefetched tasks go back now, for other workers, not once the
	// running ones end.
	w.giveBack(bg, p.exec.setAsideWaiting())
	stopped := make(chan struct{})
	go func() {
		p.list().Stop()
		close(stopped)
	}()
	w.finishWithin(bg, stopped)
	w.leave(bg, p.exec.setAside())
	w.ended.Store(true)
	if w.abandoned.over.Load() {
		return fmt.Errorf("%w: %d running (worker.Options.MaxAbandoned is %d); a fresh process frees them",
			ErrAbandoned, w.abandoned.running.Load(), w.opts.MaxAbandoned)
	}
	if err := w.stuck.Load(); err != nil {
		return *err
	}
	return nil
}

// stuckLeases is how many leases a worker may go without reporting a
// result, while Redis takes its heartbeats, before it leaves (finisher):
// 30 s with the default lease.
const stuckLeases = 3

// finishWithin waits until the parts stopped (stopped closes): the tasks
// running when the worker was told to stop have finished and their results
// are reported. After Options.Grace it waits no more for those still
// running: it cancels their contexts and gives them back to the queue at
// once, where another worker takes them (their attempt count is not
// raised: they did not fail), and their results, if they come, are
// dropped; then it waits a moment more for the parts, for the results of
// the others to be reported.
func (w *Worker) finishWithin(ctx context.Context, stopped <-chan struct{}) {
	if w.opts.Grace < 0 {
		<-stopped
		return
	}
	grace := time.NewTimer(w.opts.Grace)
	defer grace.Stop()
	select {
	case <-stopped:
		return
	case <-grace.C:
	}
	running := w.held.running()
	var tids []string
	for _, ts := range running {
		tids = append(tids, ts...)
	}
	w.held.cancel(tids, nil)
	members := make(map[int][]string, len(running))
	for shard, ts := range running {
		for _, tid := range ts {
			members[shard] = append(members[shard], tid, "!"+tid) // public or private: one of them is held
		}
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	n, err := w.source.giveBack(gctx, members, true) // they ran: their attempt counts
	cancel()
	w.counters.givenBack.Add(int64(n))
	if err != nil {
		w.log.Warn("grace ended; giving back the running tasks failed: they return to the queue when the lease expires", "tasks", len(tids), "err", err)
	} else {
		w.log.Warn("grace ended with tasks still running: they were given back to the queue, for another worker", "grace", w.opts.Grace, "tasks", len(tids), "given_back", n)
	}
	// The executors abandon the calls that ignore their cancelled context
	// after AbandonGrace; then the results of the others are reported.
	wait := abandonWait + max(w.opts.AbandonGrace, 0)
	select {
	case <-stopped:
	case <-time.After(wait):
		w.log.Warn("functions still running after their context was cancelled; leaving them", "wait", wait)
	}
}

// abandonWait is how long a worker whose grace ended waits, beyond
// Options.AbandonGrace, for the functions it cancelled to return or be
// abandoned before it retires anyway.
const abandonWait = time.Second

// workerParts are the worker's parts.
type workerParts struct {
	fetch  *fetcher
	exec   *executors
	finish *finisher
	upkeep *maintainer
}

// fed returns the parts the fetcher feeds, in the order they start: each
// after those it hands work to, so that each stops only after those that
// feed it.
func (p workerParts) fed() part.List { return part.List{p.upkeep, p.finish, p.exec} }

// list returns every part in the order they start: the fetcher, which
// feeds them all, last.
func (p workerParts) list() part.List { return append(p.fed(), p.fetch) }

// parts builds the worker's four parts, each from what it needs.
func (w *Worker) parts() workerParts {
	capacity := w.opts.Concurrency + w.opts.Prefetch
	jobs := make(chan job, capacity)
	s := newSlots(func() int { return w.opts.Concurrency + w.prefetch() })
	var fetch *fetcher
	finish := newFinisher(finisherParams{capacity: capacity, source: w.source, held: w.held,
		counters: &w.counters, failed: w.failed,
		renewed:    func() time.Time { return time.Unix(0, w.renewed.Load()) },
		stuckAfter: stuckLeases * w.opts.Lease,
		stuck: func(err error) {
			w.stuck.Store(&err)
			w.log.Error("results cannot be reported: the worker stops renewing its lease and leaves, so that its tasks are reaped", "err", err)
			w.problem.set(err.Error())
			fetch.Stop()
		}})
	exec := newExecutors(executorsParams{n: w.opts.Concurrency, jobs: jobs, results: finish.results, slots: s, held: w.held,
		source: w.source, execute: w.execute, ran: w.taskTimes.observe, counters: &w.counters, stale: staleAfter, log: w.log,
		abandonAfter: max(w.opts.AbandonGrace, 0), abandon: w.abandonTask})
	fetch = newFetcher(fetcherParams{wid: w.opts.ID, heartbeat: w.opts.Heartbeat, concurrency: w.opts.Concurrency, jobs: jobs,
		source: w.source, held: w.held, slots: s, counters: &w.counters, failed: w.failed,
		stopping: func() {
			w.draining.Store(true)
			exec.Stop()
		},
		log: w.log})
	upkeep := newMaintainer(maintainerParams{wid: w.opts.ID, lease: w.opts.Lease, source: w.source, held: w.held,
		failures: &w.failures, counters: &w.counters, info: w.info, problem: &w.problem, failed: w.failed,
		drain: fetch.Stop, draining: w.draining.Load, beat: w.beat, leaving: func() bool { return w.stuck.Load() != nil },
		log: w.log}, w.opts.Heartbeat)
	w.abandoned.drain = fetch.Stop
	return workerParts{fetch: fetch, exec: exec, finish: finish, upkeep: upkeep}
}

// leave gives the tasks set aside unrun back to the queue, then retires the
// worker from every shard: its lease ends now, and tasks left in its private
// lists are reported lost to their managers.
func (w *Worker) leave(ctx context.Context, unstarted map[int][]string) {
	w.giveBack(ctx, unstarted)
	// Failures counted since the last heartbeat are written before the
	// worker retires: a clean stop loses no count.
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	if err := countFailures(fctx, w.source.first, w.opts.ID, &w.failures, w.log); err != nil {
		w.log.Warn("writing the last failure counts failed", "err", err)
	}
	cancel()
	w.source.retire(ctx, w.info())
	w.log.Info("worker stopped")
}

// giveBack gives tasks set aside unrun back to the queue.
func (w *Worker) giveBack(ctx context.Context, unstarted map[int][]string) {
	if len(unstarted) == 0 {
		return
	}
	gctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	n, err := w.source.giveBack(gctx, unstarted, false)
	cancel()
	w.counters.givenBack.Add(int64(n))
	if err != nil {
		w.log.Warn("giving back prefetched tasks failed; they return when the lease expires", "err", err)
	}
}

// info is what the worker publishes for operators.
func (w *Worker) info() wire.WorkerInfo {
	st := w.Stats()
	host, _ := os.Hostname()
	state := "running"
	if w.draining.Load() {
		state = "draining"
	}
	aloneTask, alone := w.counters.aloneNow()
	now := time.Now()
	w.busy.mu.Lock()
	if busy := st.Running > 0; w.busy.since.IsZero() || busy != w.busy.now {
		w.busy.now, w.busy.since = busy, now
	}
	busyFor := now.Sub(w.busy.since)
	w.busy.mu.Unlock()
	return wire.WorkerInfo{
		Host: host, PID: os.Getpid(), Concurrency: w.opts.Concurrency, Lease: w.opts.Lease, Every: w.opts.Heartbeat,
		Started: w.started, Heartbeat: time.Now(),
		Running: st.Running, Taken: st.Taken, Delivered: st.Delivered, Failed: st.Failed,
		Functions: w.names(), Serves: w.served, State: state, Error: w.problem.get(),
		CacheHits: w.memo.Stats().Hits, CacheBytes: w.memo.Stats().BytesFetched,
		Suspects: st.Suspects, Alone: alone, AloneTask: aloneTask, Version: w.version, BusyFor: busyFor,
	}
}

// failed logs a failed Redis call of one of the worker's loops: at error
// level if Redis refused it for good (an ACL that lacks a command, say: it
// will not heal by retrying, and the worker cannot do its part until an
// operator fixes it), else as a warning. Either way the loop retries, and the
// error is published with the worker's info (redmap workers).
func (w *Worker) failed(op string, err error) {
	if broker.Refused(err) {
		w.log.Error("Redis refused a command the worker needs; retrying until it is allowed", "op", op, "err", err)
	} else {
		w.log.Warn("Redis call failed; retrying", "op", op, "err", err)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, op+": ") { // rdb's errors name their call already
		msg = op + ": " + msg
	}
	w.problem.set(msg)
}

// serves returns what the worker registered, "<name>\t<signature>" each:
// a take passes lanes whose tasks call anything else. Fixed once Run starts.
func (w *Worker) serves() []string { return w.served }

// registered lists what the worker registered, "<name>\t<signature>" each,
// sorted.
func (w *Worker) registered() []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	out := make([]string, 0, len(w.runtimes))
	for _, rt := range w.runtimes {
		out = append(out, rt.Name()+"\t"+rt.Signature())
	}
	slices.Sort(out)
	return out
}

// publishTypes records the structure of each registered handle's types
// under its signature, so that a manager whose batch only workers of other
// signatures could run says which field differs (ErrTypeMismatch). One
// pipeline per handle, at start; a failure is logged and otherwise ignored.
func (w *Worker) publishTypes(ctx context.Context) {
	w.mu.RLock()
	rts := slices.Collect(maps.Values(w.runtimes))
	w.mu.RUnlock()
	for _, rt := range rts {
		if err := w.source.first.PublishTypes(ctx, &broker.PublishTypesParams{Sig: rt.Signature(), Types: rt.Types()}); err != nil {
			w.log.Warn("publishing the types of a function failed; a manager of other types cannot say what differs", "func", rt.Name(), "err", err)
			return
		}
	}
}

// declareLimits records in Redis the limits declared with the worker's
// handles (see redmap.Limit), so that operators see them (redmap limit)
// and takes enforce them before any manager of the function submits. One
// script call per limited handle; a failure is logged (managers declare
// them too).
func (w *Worker) declareLimits(ctx context.Context) {
	w.mu.RLock()
	limits := maps.Clone(w.limits)
	w.mu.RUnlock()
	host, _ := os.Hostname()
	for name, l := range limits {
		l = l.Normal()
		rec := wire.NewLimitRecord(l.Rate, l.Per, l.Burst, l.Concurrency, "worker "+w.opts.ID+" on "+host, time.Now())
		if _, err := w.source.first.DeclareLimit(ctx, &broker.DeclareLimitParams{Func: name, Record: rec}); err != nil {
			w.log.Warn("declaring the limit of a function failed; its managers declare it too", "func", name, "err", err)
			return
		}
	}
}

func (w *Worker) names() []string {
	w.mu.RLock()
	defer w.mu.RUnlock()
	names := make([]string, 0, len(w.runtimes))
	for n := range w.runtimes {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// gcHeadroom is Options.GCHeadroom, or none if -1.
func (w *Worker) gcHeadroom() int64 { return max(w.opts.GCHeadroom, 0) }
