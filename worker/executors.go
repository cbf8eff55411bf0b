package worker

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/part"
	"github.com/redmap/redmap/internal/wire"
)

// executors run the jobs the fetcher hands them, Concurrency at a time, and
// pass each result on to the finisher. Once stopped (the fetcher stops),
// jobs not yet started are set aside, to be given back to the queue; they
// return once jobs is closed.
//
// They are a Drain part: Stop sets the jobs still to come aside rather than
// ending the context of those running.
type executors struct {
	*part.Runner
	executorsParams
	stopped atomic.Bool
	alone   sync.RWMutex // a suspect runs holding it for writing: alone
	check   wantedCheck

	mu        sync.Mutex
	unstarted map[int][]string // held members of jobs set aside, by shard

	// serving counts the executor goroutines; one whose job was abandoned
	// hands its count to the goroutine that replaces it.
	serving sync.WaitGroup
}

// executorsParams is what the executors are built from.
type executorsParams struct {
	n       int // Options.Concurrency
	jobs    <-chan job
	results chan<- wire.Done
	slots   *slots
	held    *held
	source  *source
	// execute runs a task and returns its result (Worker.execute).
	execute func(ctx context.Context, t wire.Taken) wire.Done
	// ran is told how long each task ran (prefetch adapts to it).
	ran      func(time.Duration)
	counters *counters
	// stale is how long a prefetched task may wait before the executors
	// check, before running it, that its batch still wants it (staleAfter).
	stale time.Duration
	// recheck is how long an answer that a waiting task is wanted holds
	// (0: recheckAfter).
	recheck time.Duration
	// log, if set, is put in the context the jobs run under once, for
	// redmap.Logger, rather than in each job's.
	log *slog.Logger
	// abandonAfter is how long a job whose context was cancelled may run
	// on before the executors abandon it (Options.AbandonGrace); 0 never.
	abandonAfter time.Duration
	// abandon is told of each job abandoned; it returns what to call if
	// the job returns at last (Worker.abandonTask).
	abandon func(ctx context.Context, t wire.Taken) (returned func())
}

func newExecutors(p executorsParams) *executors {
	e := &executors{executorsParams: p}
	if e.recheck <= 0 {
		e.recheck = recheckAfter
	}
	// Stopped, the executors start no more jobs: those still to come are
	// set aside; they return once jobs is closed and every job has run or
	// been set aside.
	e.Runner = part.Drain(e.serve, func() { e.stopped.Store(true) })
	return e
}

// serve runs the jobs, n at a time, under ctx, until jobs is closed.
func (e *executors) serve(ctx context.Context) {
	if e.log != nil {
		ctx = engine.WithLogger(ctx, e.log)
	}
	e.serving.Add(e.n)
	for range e.n {
		e.serve1(ctx)
	}
	e.serving.Wait()
}

// serve1 starts one executor goroutine, counted in e.serving (which the
// caller added to): it runs jobs until jobs is closed, or until one of
// them is abandoned, when the goroutine that replaces it takes its count.
// An abandoned goroutine is left running, counted nowhere: Go cannot stop
// it, and the worker must not wait for it.
func (e *executors) serve1(ctx context.Context) {
	go func() {
		for j := range e.jobs {
			if !e.run(ctx, j) {
				return
			}
		}
		e.serving.Done()
	}()
}

// setAside returns the held members of the jobs set aside not started, by
// shard, and forgets them.
func (e *executors) setAside() map[int][]string {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := e.unstarted
	e.unstarted = nil
	return out
}

// aside sets job j aside, not started.
func (e *executors) aside(j job) {
	e.mu.Lock()
	if e.unstarted == nil {
		e.unstarted = make(map[int][]string)
	}
	e.unstarted[j.Shard] = append(e.unstarted[j.Shard], j.Member())
	e.mu.Unlock()
}

// setAsideWaiting sets aside every job still waiting for a free executor,
// once the executors are stopped and jobs is closed (the fetcher
// returned), rather than leaving them until running tasks end; it returns
// all that was set aside, as setAside.
func (e *executors) setAsideWaiting() map[int][]string {
	for j := range e.jobs {
		e.aside(j)
		e.slots.release(1)
	}
	return e.setAside()
}

// staleAfter is how long a prefetched task may wait before the worker checks,
// before running it, that its batch still wants it: tiny tasks never wait so
// long, so the check costs nothing where prefetch matters, and a task that
// waited longer costs one round trip more than its wait.
const staleAfter = time.Millisecond

// run is one job's step through the executors: set aside if they were
// stopped; dropped unrun if it waited past stale and is no longer wanted;
// else executed (alone, if a suspect) under a context the maintainer
// cancels if its batch no longer wants it, and its result passed on unless
// it was cancelled so. It reports false if the job was abandoned (see
// watch): the goroutine must then serve no more.
//
// A task dropped, or cancelled, is released from the ledger, but Redis still
// has it held: the fetcher's sweep of orphans settles it in one script on one
// server, putting it back if its manager wants it after all (the check may
// have read a server that lost data, during a failover), dropping it if not.
// A suspect (a task lost wire.SuspectAfter times) may be a poison pill: it
// runs holding alone for writing, so that it takes no other task down with
// it.
func (e *executors) run(ctx context.Context, j job) bool {
	if e.stopped.Load() {
		e.aside(j)
		e.slots.release(1)
		return true
	}
	if time.Since(j.takenAt) > e.stale && e.check.unwanted(ctx, e, j) {
		e.drop(j)
		e.slots.release(1)
		return true
	}
	unlock := e.alone.RUnlock
	if j.Suspect() {
		e.alone.Lock()
		// Said for operators (redmap workers, the dashboard, metrics):
		// why the worker's other slots idle.
		run := &aloneRun{task: j.ID, why: fmt.Sprintf("task %s runs alone: lost %d times with its workers, maybe a poison pill", j.ID, j.Attempt)}
		e.counters.suspects.Add(1)
		e.counters.alone.Store(run)
		unlock = func() {
			e.counters.alone.CompareAndSwap(run, nil)
			e.alone.Unlock()
		}
	} else {
		e.alone.RLock()
	}
	tctx, cancel := context.WithCancel(ctx)
	// end is the end of the job's run, done once: by this goroutine when
	// the job returns, or by the watch when it abandons the job.
	end := func() {
		cancel()
		unlock()
		e.slots.release(1)
	}
	c := &running{returned: make(chan struct{})}
	stopWatch := func() bool { return false }
	if e.abandonAfter > 0 {
		stopWatch = context.AfterFunc(tctx, func() { e.watch(ctx, j, c, end) })
	}
	e.held.start(j.ID, cancel)
	began := time.Now()
	d := e.execute(tctx, j.Taken)
	stopWatch()
	if returned, ok := c.end(); !ok {
		if returned != nil {
			returned()
		}
		return false
	}
	e.ran(time.Since(began))
	e.held.stop(j.ID)
	if tctx.Err() != nil { // cancelled by the maintainer
		end()
		e.drop(j)
		return true
	}
	e.results <- d
	end()
	return true
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
		e.held.stop(j.ID)
		e.drop(j)
		return e.abandon(ctx, j.Taken)
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

// wantedCheck asks Redis which of the tasks waiting to run their managers no
// longer want. One round trip answers for every waiting task no check has
// asked about yet (or not for recheckAfter), so a task is asked about about
// once in the usual wait of a prefetch (about 10 ms of work a slot): asking
// again about every waiting task whenever one had waited past stale cost
// Redis ten HEXISTS a task of 1 ms with 80 waiting (issue 42's scale
// model, where it was two thirds of Redis's time).
type wantedCheck struct {
	mu      sync.Mutex
	asked   map[string]time.Time // waiting tasks asked about, and when
	dropped map[string]bool      // those the answer said are no longer wanted
}

// recheckAfter is how long an answer that a waiting task is wanted holds:
// a task that waits longer is asked about again before it runs. A batch
// cancelled less than this before one of its prefetched tasks starts may
// have that task run (its result is discarded); the prefetch holds about
// 10 ms of work a slot, so a task is asked about once. Each worker checks
// about once per recheckAfter while its tasks wait, so Redis gets
// workers/recheckAfter checks a second: with 1 ms tasks on workers of 8
// slots, an answer of 1 ms (as when every check asked about every waiting
// task) had 16 workers run 4,000 tasks/s at 150 µs of Redis CPU a task,
// one of 10 ms had 64 workers run 3,600 at 140 µs; 100 ms keeps the
// checks to a few hundred a second.
const recheckAfter = 100 * time.Millisecond

// unwanted reports whether j's manager no longer wants it: by the answer
// of a check that asked about it after it was taken, no longer than
// recheck (recheckAfter) ago, else by a new check, of j and every waiting task not
// asked about since. On an error it reports false: the task runs, and its
// result is discarded if unwanted. Each job is looked up once: its entry
// goes.
func (c *wantedCheck) unwanted(ctx context.Context, e *executors, j job) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asked == nil {
		c.asked, c.dropped = make(map[string]time.Time), make(map[string]bool)
	}
	defer func() { delete(c.asked, j.ID); delete(c.dropped, j.ID) }()
	now := time.Now()
	if at, ok := c.asked[j.ID]; ok && at.After(j.takenAt) && now.Sub(at) <= e.recheck {
		return c.dropped[j.ID]
	}
	ask := map[int][]string{j.Shard: {j.ID}}
	waiting := e.held.waiting()
	var n int // tasks waiting
	for shard, ids := range waiting {
		n += len(ids)
		for _, tid := range ids {
			if at, ok := c.asked[tid]; (!ok || now.Sub(at) > e.recheck) && tid != j.ID {
				ask[shard] = append(ask[shard], tid)
			}
		}
	}
	unwanted, err := e.source.unwanted(ctx, ask)
	if err != nil {
		return false
	}
	for _, ids := range ask {
		for _, tid := range ids {
			c.asked[tid] = now
			delete(c.dropped, tid)
		}
	}
	for _, tid := range unwanted {
		c.dropped[tid] = true
	}
	// Tasks no longer waiting (run unlooked-up, or given back) leave no
	// entry behind for long.
	if len(c.asked) > 2*n+64 {
		still := make(map[string]bool, n)
		for _, ids := range waiting {
			for _, tid := range ids {
				still[tid] = true
			}
		}
		for tid := range c.asked {
			if !still[tid] {
				delete(c.asked, tid)
				delete(c.dropped, tid)
			}
		}
	}
	return c.dropped[j.ID]
}

// drop forgets a job whose result nobody wants.
func (e *executors) drop(j job) {
	e.held.release(j.ID)
	e.counters.discarded.Add(1)
}
