package worker

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redmap/redmap/internal/rdb"
)

// executors run the jobs the fetcher hands them, Concurrency at a time, and
// pass each result on to the finisher. Once the fetcher has stopped, jobs not
// yet started are set aside, to be given back to the queue.
type executors struct {
	w       *Worker
	jobs    <-chan job
	results chan<- rdb.Done
	slots   *slots
	stopped func() bool // the fetcher stopped: start nothing more
	alone   sync.RWMutex
	wg      sync.WaitGroup
	check   wantedCheck

	mu        sync.Mutex
	unstarted map[int][]string // held members of jobs set aside, by shard
}

func newExecutors(w *Worker, jobs <-chan job, results chan<- rdb.Done, s *slots, stopped func() bool) *executors {
	return &executors{w: w, jobs: jobs, results: results, slots: s, stopped: stopped}
}

// start starts n executors, running tasks under ctx.
func (e *executors) start(ctx context.Context, n int) {
	for range n {
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			for j := range e.jobs {
				e.run(ctx, j)
			}
		}()
	}
}

// wait returns once jobs is closed and every job has run or been set aside.
func (e *executors) wait() { e.wg.Wait() }

// setAside returns the held members of the jobs not started, by shard.
func (e *executors) setAside() map[int][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.unstarted
}

// staleAfter is how long a prefetched task may wait before the worker checks,
// before running it, that its batch still wants it: tiny tasks never wait so
// long, so the check costs nothing where prefetch matters, and a task that
// waited longer costs one round trip more than its wait. (A test may have
// every prefetched task checked: hooks.checkAll.)
const staleAfter = time.Millisecond

// stale returns staleAfter, or 0 if a test has every prefetched task checked.
func (w *Worker) stale() time.Duration {
	if w.hooks.checkAll {
		return 0
	}
	return staleAfter
}

// run is one job's step through the executors: set aside if the fetcher has
// stopped; dropped unrun if it waited past staleAfter and is no longer
// wanted; else executed (alone, if a suspect) under a context the maintainer
// cancels if its batch no longer wants it, and its result passed on unless
// it was cancelled so.
//
// A task dropped, or cancelled, is released from the ledger, but Redis still
// has it held: the fetcher's sweep of orphans settles it in one script on one
// server, putting it back if its manager wants it after all (the check may
// have read a server that lost data, during a failover), dropping it if not.
// A task lost before (attempt above 0) may be a poison pill: it runs holding
// alone for writing, so that it takes no other task down with it.
func (e *executors) run(ctx context.Context, j job) {
	w := e.w
	defer e.slots.release(1)
	if e.stopped() {
		e.mu.Lock()
		if e.unstarted == nil {
			e.unstarted = make(map[int][]string)
		}
		e.unstarted[j.Shard] = append(e.unstarted[j.Shard], j.Member())
		e.mu.Unlock()
		return
	}
	if time.Since(j.takenAt) > w.stale() && e.check.unwanted(ctx, w, j) {
		e.drop(j)
		return
	}
	if j.Attempt > 0 {
		e.alone.Lock()
		defer e.alone.Unlock()
		if w.hooks.suspect != nil {
			w.hooks.suspect(j.Taken)
		}
	} else {
		e.alone.RLock()
		defer e.alone.RUnlock()
	}
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w.held.start(j.ID, cancel)
	began := time.Now()
	d := w.execute(tctx, j.Taken)
	w.taskTimes.observe(time.Since(began))
	w.held.stop(j.ID)
	if tctx.Err() != nil { // cancelled by the maintainer
		e.drop(j)
		return
	}
	e.results <- d
}

// wantedCheck asks Redis which of the tasks waiting to run their managers no
// longer want, for every task waiting at once: one round trip answers for all
// the tasks a prefetch holds, and tasks that waited past staleAfter together
// share one check no older than staleAfter.
type wantedCheck struct {
	mu      sync.Mutex
	at      time.Time       // when the last check began
	dropped map[string]bool // its answer: the tasks no longer wanted
}

// unwanted reports whether j's manager no longer wants it, by the last
// check if that began after j was taken and no longer than staleAfter ago,
// else by a new one. On an error it reports false: the task runs, and its
// result is discarded if unwanted.
func (c *wantedCheck) unwanted(ctx context.Context, w *Worker, j job) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if !c.at.After(j.takenAt) || now.Sub(c.at) > w.stale() {
		waiting := w.held.waiting()
		if !slices.Contains(waiting[j.Shard], j.ID) {
			waiting[j.Shard] = append(waiting[j.Shard], j.ID)
		}
		dropped := make(map[string]bool)
		for i, tids := range waiting {
			unwanted, err := w.shard(i).Unwanted(ctx, w.opts.ID, tids)
			if err != nil {
				return false
			}
			for _, tid := range unwanted {
				dropped[tid] = true
			}
		}
		c.at, c.dropped = now, dropped
	}
	return c.dropped[j.ID]
}

// drop forgets a job whose result nobody wants.
func (e *executors) drop(j job) {
	e.w.held.release(j.ID)
	e.w.counters.discarded.Add(1)
}
