// Package worker runs redmap tasks: a Worker registers functions by name and
// serves one queue, taking tasks from its private list first and then from the
// public list, until its context ends.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/handler"
	"github.com/redmap/redmap/internal/rdb"
)

// Worker runs the tasks of one queue. Build it with New, register functions
// with Handle, then call Run.
type Worker struct {
	rdb  *rdb.RDB
	opts Options
	memo *cache.Memo
	log  *slog.Logger

	mu       sync.RWMutex
	handlers map[string]handler.Runtime
	running  atomic.Bool

	// holding has every task the worker took and has not yet reported: the
	// ones running (with the cancel of their context) and the ones waiting
	// to be finished (cancel nil).
	holdMu  sync.Mutex
	holding map[string]context.CancelFunc

	counters counters
	started  time.Time
	duration prometheus.Histogram // seconds per task run

	failMu   sync.Mutex
	failures []string // JSON failure records not yet written to Redis

	stopFetch context.CancelFunc // set by Run: stop taking tasks (drain)
	draining  atomic.Bool

	mismatches sync.Map // manager signature -> how it differs from the worker's handle

	problemMu   sync.Mutex
	problemText string // the last failed Redis call, for operators; "" when all is well
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
	return &Worker{
		rdb:      rdb.New(client, opts.Prefix, opts.Queue),
		opts:     opts,
		memo:     cache.NewMemo(cache.NewStore(client, opts.Prefix, 0), opts.CacheBytes),
		log:      opts.Logger.With("worker", opts.ID, "queue", opts.Queue),
		handlers: make(map[string]handler.Runtime),
		holding:  make(map[string]context.CancelFunc),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "redmap_worker_task_duration_seconds", Help: "Time spent running one task (all its elements).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 10),
		}),
	}, nil
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
// them), and returns nil. Redis errors are
// logged and retried with backoff; they do not end Run, except that if Redis
// refuses a command the worker needs at the start (an ACL without it), Run
// returns that *redmap.CommandError having taken nothing. A worker runs once.
//
// Every Heartbeat it renews its lease, reaps workers whose lease expired
// (their tasks go back to the queue), and cancels the context of running
// tasks whose batch was cancelled.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}

	// Tasks run detached from ctx: when ctx ends, the worker drains what it
	// holds instead of abandoning it.
	runCtx := context.WithoutCancel(ctx)
	hbCtx, stopHeartbeat := context.WithCancel(runCtx)
	w.started = time.Now()
	// fetchCtx ends with ctx, or when an operator drains the worker: it then
	// stops taking tasks and Run returns once the ones it runs are done.
	fetchCtx, stopFetch := context.WithCancel(ctx)
	defer stopFetch()
	w.stopFetch = stopFetch

	// Register before the first take, so that a worker killed at any instant
	// after taking is in the workers set for the reap to find; and fail at
	// once, having taken nothing, if Redis refuses what the worker needs.
	if err := w.rdb.Preflight(ctx, 0, w.log); err != nil && rdb.Refused(err) {
		stopHeartbeat()
		return fmt.Errorf("worker: cannot serve queue %q: %w", w.opts.Queue, err)
	}
	if err := w.maintain(runCtx); err != nil && rdb.Refused(err) {
		stopHeartbeat()
		return fmt.Errorf("worker: cannot serve queue %q: %w", w.opts.Queue, err)
	}
	context.AfterFunc(fetchCtx, func() { w.draining.Store(true) })

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.heartbeat(hbCtx)
	}()

	// A token per task taken and not yet run to the end: at most
	// Concurrency running and Prefetch waiting.
	capacity := w.opts.Concurrency + w.opts.Prefetch
	slots := make(chan struct{}, capacity)
	tasks := make(chan job, capacity)
	done := make(chan rdb.Done, capacity)

	var (
		unstarted []string // held members of prefetched tasks not run at stop
		unMu      sync.Mutex
		alone     sync.RWMutex // a suspect task runs alone (see job)
	)
	var execs sync.WaitGroup
	for range w.opts.Concurrency {
		execs.Add(1)
		go func() {
			defer execs.Done()
			for j := range tasks {
				// Once ctx has ended (or the worker drains), tasks not
				// started go back to the queue.
				if fetchCtx.Err() != nil {
					unMu.Lock()
					unstarted = append(unstarted, j.Member())
					unMu.Unlock()
					if j.ran != nil {
						close(j.ran)
					}
					<-slots
					continue
				}
				d, ran := w.runJob(runCtx, j, &alone)
				if j.ran != nil {
					close(j.ran)
				}
				<-slots
				if ran {
					done <- d
				} else {
					w.released([]rdb.Done{{ID: j.ID}})
					w.counters.discarded.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.finisher(runCtx, done)
	}()

	// When ctx ends, ring our own bell so that fetch's blocking wait returns
	// now rather than at its timeout.
	rang := make(chan struct{})
	stopRing := context.AfterFunc(fetchCtx, func() {
		defer close(rang)
		rctx, cancel := context.WithTimeout(runCtx, time.Second)
		defer cancel()
		_ = w.rdb.Ring(rctx, w.opts.ID)
	})
	w.fetch(fetchCtx, slots, tasks)
	if !stopRing() {
		<-rang
	}

	// Tasks already running finish; prefetched ones go back to the queue.
	close(tasks)
	execs.Wait()
	close(done)
	stopHeartbeat()
	wg.Wait()
	if len(unstarted) > 0 {
		gctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
		n, err := w.rdb.GiveBack(gctx, w.opts.ID, unstarted)
		cancel()
		if err != nil {
			w.log.Warn("giving back prefetched tasks failed; they return when the lease expires", "err", err)
		} else {
			w.counters.givenBack.Add(int64(n))
		}
	}

	dctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
	defer cancel()
	if r, err := w.rdb.Retire(dctx, w.opts.ID); err != nil {
		w.log.Warn("retiring failed; the lease will expire", "err", err)
	} else if r.Lost > 0 {
		w.log.Warn("private tasks left unrun were reported lost", "tasks", r.Lost)
	}
	w.log.Info("worker stopped")
	return nil
}

// job is a taken task, and when it was taken. ran, if not nil, is closed
// once the task has run or been skipped: fetch waits on it for a suspect.
type job struct {
	rdb.Taken
	takenAt time.Time
	ran     chan struct{}
}

// staleAfter is how long a prefetched task may wait before the worker checks,
// before running it, that its batch still wants it: tiny tasks never wait so
// long, so the check costs nothing where prefetch matters, and a task that
// waited longer costs one round trip more than its wait.
const staleAfter = time.Millisecond

// runJob runs one job and returns its result to finish, or false if it has
// none: a job that waited past staleAfter and is no longer wanted is not
// run, and the result of one cancelled while it ran (no longer wanted) is not
// reported. Either way the worker forgets it but Redis still has it held, and
// the sweep of orphans (giveBack) settles it in one script on one server: put
// back if its manager wants it after all (the check may have read a server
// that lost data, during a failover), dropped if not. A task lost before
// (attempt above 0) may be a poison pill: it runs alone, holding alone for
// writing, so that it takes no other task down with it.
func (w *Worker) runJob(ctx context.Context, j job, alone *sync.RWMutex) (rdb.Done, bool) {
	if time.Since(j.takenAt) > staleAfter {
		if unwanted, err := w.rdb.Unwanted(ctx, w.opts.ID, []string{j.ID}); err == nil && len(unwanted) == 1 {
			return rdb.Done{}, false
		}
	}
	if j.Attempt > 0 {
		alone.Lock()
		defer alone.Unlock()
	} else {
		alone.RLock()
		defer alone.RUnlock()
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.setRunning(j.ID, cancel)
	d := w.execute(tctx, j.Taken)
	w.setRunning(j.ID, nil)
	if tctx.Err() != nil { // cancelled by cancelUnwanted
		return rdb.Done{}, false
	}
	return d, true
}

// fetch takes tasks while ctx lasts, as many per round trip as there are free
// slots and room to prefetch, and blocks on the worker's bell when there are
// none. Every Heartbeat
// it also gives back held tasks it does not know of (see giveBack); it does so
// here, between takes, so that no take is in flight while it compares.
func (w *Worker) fetch(ctx context.Context, slots chan struct{}, tasks chan<- job) {
	var bo backoff.Backoff
	checkAt := time.Now().Add(w.opts.Heartbeat)
	for ctx.Err() == nil {
		// Wait for one free slot, then claim every other free one.
		select {
		case slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		free := 1
		for free < cap(slots) {
			select {
			case slots <- struct{}{}:
				free++
				continue
			default:
			}
			break
		}
		taken, err := w.rdb.Take(ctx, w.opts.ID, free, w.opts.Lease)
		for range free - len(taken) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			w.failed("take", err)
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		bo.Reset()
		w.counters.taken.Add(int64(len(taken)))
		now := time.Now()
		var suspect chan struct{}
		for _, t := range taken {
			w.setRunning(t.ID, nil)
			j := job{Taken: t, takenAt: now}
			if t.Attempt > 0 {
				suspect = make(chan struct{})
				j.ran = suspect
			}
			tasks <- j
		}
		// A suspect (a task lost before: maybe a poison pill) comes alone in
		// its take, and runs alone. Taking nothing more until it has run
		// means no other suspect waits in this worker's prefetch meanwhile,
		// to die with it: a poison pill costs an innocent task at most the
		// one attempt it lost when it first shared a worker with the pill.
		if suspect != nil {
			select {
			case <-suspect:
			case <-ctx.Done():
				return
			}
		}
		if time.Now().After(checkAt) {
			w.giveBack(ctx)
			checkAt = time.Now().Add(w.opts.Heartbeat)
		}
		if len(taken) == 0 {
			if _, err := w.rdb.WaitBell(ctx, w.opts.ID, w.opts.IdleWait); err != nil && ctx.Err() == nil {
				w.failed("wait for work", err)
				if !bo.Wait(ctx) {
					return
				}
			}
		}
	}
}

// giveBack puts back tasks that Redis says the worker holds but that it does
// not hold: those of a take whose reply was lost on a dropped connection.
func (w *Worker) giveBack(ctx context.Context) {
	held, err := w.rdb.Held(ctx, w.opts.ID)
	if err != nil {
		w.failed("read held tasks", err)
		return
	}
	var orphans []string
	w.holdMu.Lock()
	for _, m := range held {
		if _, ok := w.holding[rdb.HeldID(m)]; !ok {
			orphans = append(orphans, m)
		}
	}
	w.holdMu.Unlock()
	if len(orphans) == 0 {
		return
	}
	n, err := w.rdb.GiveBack(ctx, w.opts.ID, orphans)
	if err != nil {
		w.failed("give back orphaned tasks", err)
		return
	}
	w.counters.givenBack.Add(int64(n))
	w.log.Info("gave back tasks held but never received", "tasks", n)
}

// setRunning records that the worker holds task tid, running under cancel
// (nil if not running).
func (w *Worker) setRunning(tid string, cancel context.CancelFunc) {
	w.holdMu.Lock()
	w.holding[tid] = cancel
	w.holdMu.Unlock()
}

// released forgets tasks the worker has reported.
func (w *Worker) released(done []rdb.Done) {
	w.holdMu.Lock()
	for _, d := range done {
		delete(w.holding, d.ID)
	}
	w.holdMu.Unlock()
}

// heartbeat, every Heartbeat until ctx ends, renews the worker's lease and
// runs its upkeep (see maintain).
func (w *Worker) heartbeat(ctx context.Context) {
	t := time.NewTicker(w.opts.Heartbeat)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		w.maintain(ctx)
	}
}

// state is what operators see of the worker: running, or draining once it
// takes no more tasks.
func (w *Worker) state() string {
	if w.draining.Load() {
		return "draining"
	}
	return "running"
}

// maintain renews the lease, reaps dead workers, cancels running tasks their
// managers no longer want and records failures. It returns the heartbeat's
// error. A step that fails is logged (at error level if Redis refuses it for
// good) and published with the next heartbeat for operators.
func (w *Worker) maintain(ctx context.Context) error {
	drain, err := w.rdb.Heartbeat(ctx, w.opts.ID, w.opts.Lease, w.info()...)
	if err != nil {
		if ctx.Err() == nil {
			w.failed("heartbeat", err)
			// The lease could not be renewed; say why where operators look.
			w.rdb.PublishError(ctx, w.opts.ID, w.opts.Lease, w.problem())
		}
		return err
	}
	ok := true
	if drain && !w.draining.Load() {
		w.log.Info("drain requested: taking no more tasks, exiting when idle")
		w.stopFetch()
	}
	ok = w.reap(ctx) && ok
	ok = w.cancelUnwanted(ctx) && ok
	if recs := w.takeFailures(); len(recs) > 0 {
		if err := w.rdb.RecordFailures(ctx, recs); err != nil {
			w.failed("record failures", err)
			ok = false
		}
	}
	if ok {
		w.setProblem("")
	}
	return nil
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

// info is what the worker publishes for operators with each heartbeat.
func (w *Worker) info() []string {
	st := w.Stats()
	host, _ := os.Hostname()
	return []string{
		"host", host, "pid", strconv.Itoa(os.Getpid()),
		"concurrency", strconv.Itoa(w.opts.Concurrency),
		"lease", strconv.FormatInt(w.opts.Lease.Milliseconds(), 10),
		"started", strconv.FormatInt(w.started.Unix(), 10),
		"heartbeat", strconv.FormatInt(time.Now().UnixMilli(), 10),
		"running", strconv.FormatInt(st.Running, 10),
		"taken", strconv.FormatInt(st.Taken, 10),
		"delivered", strconv.FormatInt(st.Delivered, 10),
		"failed", strconv.FormatInt(st.Failed, 10),
		"functions", strings.Join(w.names(), ","),
		"state", w.state(),
		"error", w.problem(),
	}
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

func (w *Worker) reap(ctx context.Context) bool {
	r, err := w.rdb.Reap(ctx)
	if err != nil {
		if ctx.Err() == nil {
			w.failed("reap dead workers", err)
		}
		return false
	}
	if r.Workers > 0 {
		w.counters.reaped.Add(int64(r.Workers))
		w.counters.requeued.Add(int64(r.Requeued))
		w.log.Info("reaped dead workers", "workers", r.Workers, "requeued", r.Requeued, "lost", r.Lost)
	}
	return true
}

func (w *Worker) cancelUnwanted(ctx context.Context) bool {
	var tids []string
	w.holdMu.Lock()
	for tid, cancel := range w.holding {
		if cancel != nil {
			tids = append(tids, tid)
		}
	}
	w.holdMu.Unlock()
	if len(tids) == 0 {
		return true
	}
	unwanted, err := w.rdb.Unwanted(ctx, w.opts.ID, tids)
	if err != nil {
		if ctx.Err() == nil {
			w.failed("check running tasks are wanted", err)
		}
		return false
	}
	w.holdMu.Lock()
	for _, tid := range unwanted {
		if cancel := w.holding[tid]; cancel != nil {
			cancel()
		}
	}
	w.holdMu.Unlock()
	return true
}

// maxFinish caps the results reported in one Finish call.
const maxFinish = 1000

// finisher reports results as they come, as many per script call as are
// waiting, until done is closed and drained.
func (w *Worker) finisher(ctx context.Context, done <-chan rdb.Done) {
	batch := make([]rdb.Done, 0, maxFinish)
	for d := range done {
		batch = append(batch[:0], d)
	more:
		for len(batch) < maxFinish {
			select {
			case d, ok := <-done:
				if !ok {
					break more
				}
				batch = append(batch, d)
			default:
				break more
			}
		}
		w.report(ctx, batch)
		w.released(batch)
	}
}

// report finishes a batch of results, retrying while Redis is unreachable
// (finishing twice delivers once). If it gives up, the tasks stay in the
// worker's held set, and giveBack returns them to the queue to run again.
func (w *Worker) report(ctx context.Context, batch []rdb.Done) {
	var bo backoff.Backoff
	for attempt := 1; ; attempt++ {
		n, err := w.rdb.Finish(ctx, w.opts.ID, batch)
		if err == nil {
			w.counters.delivered.Add(int64(n))
			w.counters.discarded.Add(int64(len(batch) - n))
			return
		}
		w.failed("finish", err)
		if attempt == 10 || !bo.Wait(ctx) {
			return
		}
	}
}
