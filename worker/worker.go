// Package worker runs redmap tasks: a Worker registers functions by name and
// serves one queue, taking tasks from its private list first and then from the
// public list, until its context ends.
package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redmap/redmap"
	"github.com/redmap/redmap/cache"
	"github.com/redmap/redmap/internal/rdb"
)

// Worker runs the tasks of one queue. Build it with New, register functions
// with Handle, then call Run.
type Worker struct {
	rdb  *rdb.RDB
	opts Options
	memo *cache.Memo

	mu       sync.RWMutex
	handlers map[string]redmap.Handler
	running  atomic.Bool
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
		handlers: make(map[string]redmap.Handler),
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
		w.handlers[h.Name()] = h
	}
	return nil
}

func (w *Worker) handler(name string) redmap.Handler {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.handlers[name]
}

// Run serves the queue until ctx ends, then stops taking tasks, finishes and
// reports the ones it holds, deregisters, and returns nil. Redis errors are
// logged and retried with backoff; they do not end Run. A worker runs once.
func (w *Worker) Run(ctx context.Context) error {
	if !w.running.CompareAndSwap(false, true) {
		return errors.New("worker: Run called twice")
	}
	log := w.opts.Logger.With("worker", w.opts.ID, "queue", w.opts.Queue)

	// Tasks run detached from ctx: when ctx ends, the worker drains what it
	// holds instead of abandoning it.
	runCtx := context.WithoutCancel(ctx)
	hbCtx, stopHeartbeat := context.WithCancel(runCtx)

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.heartbeat(hbCtx, log)
	}()

	slots := make(chan struct{}, w.opts.Concurrency) // a token per running task
	tasks := make(chan rdb.Taken)
	done := make(chan rdb.Done, w.opts.Concurrency)

	var execs sync.WaitGroup
	for range w.opts.Concurrency {
		execs.Add(1)
		go func() {
			defer execs.Done()
			for t := range tasks {
				d := w.execute(runCtx, t)
				<-slots
				done <- d
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.finisher(runCtx, done, log)
	}()

	// When ctx ends, ring our own bell so that fetch's blocking wait returns
	// now rather than at its timeout.
	rang := make(chan struct{})
	stopRing := context.AfterFunc(ctx, func() {
		defer close(rang)
		rctx, cancel := context.WithTimeout(runCtx, time.Second)
		defer cancel()
		_ = w.rdb.Ring(rctx, w.opts.ID)
	})
	w.fetch(ctx, slots, tasks, log)
	if !stopRing() {
		<-rang
	}

	close(tasks)
	execs.Wait()
	close(done)
	stopHeartbeat()
	wg.Wait()

	dctx, cancel := context.WithTimeout(runCtx, 5*time.Second)
	defer cancel()
	if err := w.rdb.Deregister(dctx, w.opts.ID); err != nil {
		log.Warn("deregister failed; the lease will expire", "err", err)
	}
	log.Info("worker stopped")
	return nil
}

// fetch takes tasks while ctx lasts, as many per round trip as there are free
// slots, and blocks on the worker's bell when there are none.
func (w *Worker) fetch(ctx context.Context, slots chan struct{}, tasks chan<- rdb.Taken, log *slog.Logger) {
	var backoff backoff
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
		taken, err := w.rdb.Take(ctx, w.opts.ID, free)
		for range free - len(taken) {
			<-slots
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			log.Warn("take failed", "err", err)
			if !backoff.wait(ctx) {
				return
			}
			continue
		}
		backoff.reset()
		for _, t := range taken {
			tasks <- t
		}
		if len(taken) == 0 {
			if _, err := w.rdb.WaitBell(ctx, w.opts.ID, w.opts.IdleWait); err != nil && ctx.Err() == nil {
				log.Warn("wait failed", "err", err)
				if !backoff.wait(ctx) {
					return
				}
			}
		}
	}
}

// heartbeat renews the worker's lease until ctx ends.
func (w *Worker) heartbeat(ctx context.Context, log *slog.Logger) {
	t := time.NewTicker(w.opts.Heartbeat)
	defer t.Stop()
	for {
		if err := w.rdb.Heartbeat(ctx, w.opts.ID, w.opts.Lease); err != nil && ctx.Err() == nil {
			log.Warn("heartbeat failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// maxFinish caps the results reported in one Finish call.
const maxFinish = 1000

// finisher reports results as they come, as many per script call as are
// waiting, until done is closed and drained.
func (w *Worker) finisher(ctx context.Context, done <-chan rdb.Done, log *slog.Logger) {
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
		w.report(ctx, batch, log)
	}
}

// report finishes a batch of results, retrying while Redis is unreachable. If
// it gives up, the tasks stay held and return to the queue when the worker's
// lease expires.
func (w *Worker) report(ctx context.Context, batch []rdb.Done, log *slog.Logger) {
	var backoff backoff
	for attempt := 1; ; attempt++ {
		_, err := w.rdb.Finish(ctx, w.opts.ID, batch)
		if err == nil {
			return
		}
		log.Warn("finish failed", "err", err, "results", len(batch), "attempt", attempt)
		if attempt == 10 || !backoff.wait(ctx) {
			return
		}
	}
}

// backoff waits between retries: 50 ms, doubling to 2 s.
type backoff struct{ d time.Duration }

func (b *backoff) reset() { b.d = 0 }

// wait sleeps for the next delay; false if ctx ended first.
func (b *backoff) wait(ctx context.Context) bool {
	b.d = min(max(2*b.d, 50*time.Millisecond), 2*time.Second)
	t := time.NewTimer(b.d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
