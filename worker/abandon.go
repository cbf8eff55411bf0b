package worker

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/internal/broker/wire"
)

// ErrAbandoned is what Run's error wraps when the worker stopped because
// Options.MaxAbandoned calls it abandoned were still running: functions
// that ignore their context, which only a fresh process frees.
var ErrAbandoned = errors.New("worker: too many abandoned calls still running")

// abandoned counts the calls the worker abandoned (see
// Options.AbandonGrace), and those of them still running; and apart, the
// losing copies of backup races left running (outrun), which are not
// abandoned calls: see Worker.abandonTask.
type abandoned struct {
	total, running atomic.Int64
	outrun         atomic.Int64
	over           atomic.Bool // running reached Options.MaxAbandoned: the worker drains, and Run fails
	// drain stops the fetcher (set by Run before any task runs).
	drain func()
}

// abandon records that the worker abandoned a call on task tid (attrs say
// which and why), logs it, and drains the worker once
// Options.MaxAbandoned abandoned calls are running; it returns what to
// call when the call returns at last. It does not block.
func (w *Worker) abandon(ctx context.Context, tid string, attrs ...any) (returned func()) {
	a := &w.abandoned
	a.total.Add(1)
	n := a.running.Add(1)
	w.log.ErrorContext(ctx, "a function ignored its context past its bound: the call was abandoned and runs on; its result, if it ever returns, is dropped",
		append([]any{"task", tid, "abandoned_running", n, "abandoned_limit", w.opts.MaxAbandoned, "abandoned_total", a.total.Load()}, attrs...)...)
	if limit := int64(w.opts.MaxAbandoned); limit > 0 && n >= limit && a.over.CompareAndSwap(false, true) {
		w.log.ErrorContext(ctx, "too many abandoned calls still running: draining, then exiting with an error for a supervisor to start a fresh process",
			"abandoned_running", n, "abandoned_limit", limit)
		if a.drain != nil {
			a.drain()
		}
	}
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			left := a.running.Add(-1)
			w.log.Warn("an abandoned call returned at last; its result was dropped", "task", tid, "abandoned_running", left)
		}
	}
}

// abandonTask is abandon for task t, abandoned by the executors: its context
// was cancelled (its batch no longer wants it, or the worker's Grace is
// over) and it had not returned Options.AbandonGrace later.
//
// A call that lost a backup's race (outrun: the task's other copy delivered
// its result first) is not abandoned so: a function declared Idempotent
// may be run twice by design, and a call outrun because it hung on this
// worker is what backups are for. It is left to finish, its result
// dropped, said at INFO and counted apart (Stats.OutrunRunning,
// redmap_worker_calls_outrun_running), never
// toward Options.MaxAbandoned. What bounds such calls: a task has at most
// one copy, a batch at most a tenth of its tasks' worth, and only near
// its end (manager.Backups).
func (w *Worker) abandonTask(ctx context.Context, t wire.Taken, outrun bool) (returned func()) {
	if !outrun {
		return w.abandon(ctx, t.ID, "after", "its task's context was cancelled", "abandon_grace", w.opts.AbandonGrace)
	}
	a := &w.abandoned
	n := a.outrun.Add(1)
	w.log.InfoContext(ctx, "a losing backup copy ignored its context: the task's other copy won, so this call is left to finish, its result dropped; it is not counted as abandoned",
		"task", t.ID, "backup", t.Backup, "outrun_running", n, "abandon_grace", w.opts.AbandonGrace)
	var once atomic.Bool
	return func() {
		if once.CompareAndSwap(false, true) {
			w.log.Debug("a losing backup copy returned at last; its result was dropped", "task", t.ID, "outrun_running", a.outrun.Add(-1))
		}
	}
}

// watch abandons job j, whose context was just cancelled, if it has not
// returned e.abandonAfter later (c says whether it did): a function that
// ignores its context must not hold a slot, nor a task, for ever. It drops
// the job (its result, if it comes, is not reported), ends its run (end),
// and starts a goroutine to serve in its place.
func (e *executors) watch(ctx context.Context, j job, c *running, end func()) {
	t := time.NewTimer(e.abandonAfter)
	defer t.Stop()
	select {
	case <-c.returned:
		return
	case <-t.C:
	}
	ok := c.abandon(func() func() {
		outrun := e.held.outran(j.ID)
		e.held.stop(j.ID)
		e.drop(j)
		return e.abandon(ctx, j.Taken, outrun)
	})
	if !ok {
		return // it returned as the timer fired
	}
	end()
	e.serve1(ctx)
}

// running is a job's run, which ends once: it returns, or it is abandoned.
type running struct {
	mu        sync.Mutex
	returned  chan struct{} // closed once it returned, unless abandoned first
	abandoned bool
	// late is called when an abandoned run returns at last.
	late func()
}

// end records that the run returned; false if it had been abandoned, with
// what to call now that it returned.
func (c *running) end() (late func(), ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.abandoned {
		return c.late, false
	}
	close(c.returned)
	return nil, true
}

// abandon abandons the run, unless it returned, calling how (under c's
// lock, so that a return waits for late) for what to call if it returns at
// last; it reports whether it abandoned it.
func (c *running) abandon(how func() (late func())) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	select {
	case <-c.returned:
		return false
	default:
	}
	c.abandoned = true
	c.late = how()
	return true
}
