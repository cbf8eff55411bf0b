package worker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redmap/redmap/codec"
	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/broker/wire"
	"github.com/redmap/redmap/internal/engine"
	"github.com/redmap/redmap/internal/part"
	"github.com/redmap/redmap/internal/tracing"
)

// The processor is the worker's take → run → report loop, in the order a
// task goes through it:
//
//  1. Take (fetcher.fetch): wait for free slots (slots.acquire), take as
//     many tasks as there are, from the queue's shards (source.take:
//     take.lua), record them in the ledger (held.add), and hand them to the
//     executors over jobs.
//  2. Run (executors.run): Concurrency goroutines each start a job, unless
//     the worker stops (the job is set aside, and given back) or the job
//     waited past staleAfter and its batch no longer wants it (wanted.go).
//     Worker.execute decodes it, resolves its function and constant
//     (resolve.go), runs the function element by element (internal/engine),
//     and encodes the result: a suspect alone, under a context the
//     maintainer cancels if its batch no longer wants it, and the abandon
//     watch (abandon.go) bounds.
//  3. Report: the result goes over results to the finisher, which reports
//     what waits in one call per shard (source.finish: finish.lua) and
//     releases the tasks from the ledger (finisher.go).
//
// The parts behind it each have their own file: slots.go, held.go (the
// ledger), wanted.go, abandon.go, resolve.go, finisher.go (batching and
// retries) and source.go (the shards, their bells and the fair rotation).

// fetcher takes tasks from the source and hands them to the executors: as
// many per round trip as there are free slots, the worker's private list
// first; while there are none, it blocks on its bell with the next take
// pipelined behind the wait (WaitTake), so that a wake-up brings its tasks
// along. It stops when its context ends (the worker's, or Stop: an
// operator drains it), and then closes jobs.
type fetcher struct {
	fetcherParams
	*part.Runner
	orphanWait backoff.Backoff // between takes refused a suspect for orphans; owned by the fetch loop
}

// fetcherParams is what a fetcher is built from.
type fetcherParams struct {
	wid         string
	heartbeat   time.Duration // Options.Heartbeat: how often to look for orphans
	concurrency int           // Options.Concurrency
	jobs        chan<- job    // to the executors; the fetcher closes it when it stops
	source      *source
	held        *held
	slots       *slots
	counters    *counters
	failed      func(op string, err error)
	// stopping is called once the fetcher is told to stop, before it has:
	// the worker drains.
	stopping func()
	log      *slog.Logger
}

// job is a taken task, and when it was taken.
type job struct {
	wire.Taken
	takenAt time.Time
}

func newFetcher(p fetcherParams) *fetcher {
	f := &fetcher{fetcherParams: p}
	f.Runner = part.New(f.run)
	return f
}

func (f *fetcher) run(ctx context.Context) {
	defer close(f.jobs)
	// Once stopped, ring the worker's own bells, so that a blocking wait for
	// work returns now rather than at its timeout.
	rang := make(chan struct{})
	unring := context.AfterFunc(ctx, func() {
		defer close(rang)
		f.stopping()
		f.source.stopped(context.WithoutCancel(ctx))
	})
	f.fetch(ctx)
	if !unring() {
		<-rang
	}
	f.source.closed()
}

// fetch takes tasks until ctx ends. Every Heartbeat it also gives back
// orphans (see giveBackOrphans); it does so here, between takes, so that no
// take is in flight while it compares.
func (f *fetcher) fetch(ctx context.Context) {
	var bo backoff.Backoff
	checkAt := time.Now().Add(f.heartbeat)
	for ctx.Err() == nil {
		if !f.source.await(ctx) {
			return
		}
		free := f.slots.acquire(ctx)
		if free == 0 {
			return
		}
		r := f.source.take(ctx, free, f.room, f.held.size)
		f.slots.release(free - len(r.taken))
		if r.err != nil {
			if ctx.Err() != nil {
				return
			}
			f.failed("take", r.err)
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		bo.Reset()
		f.counters.taken.Add(int64(len(r.taken)))
		if !f.handOut(ctx, r) {
			return
		}
		if r.drained {
			// The next take waits for a bell: let the executors start the
			// tasks just handed out first, on this processor, rather than
			// after the wait is sent (a lone task's result then leaves a
			// round trip's writing sooner).
			runtime.Gosched()
		}
		if r.room && len(r.taken) == 0 {
			// A limited task waits for room to start: take again once one
			// of the worker's tasks ends (a prefetch slot free now would
			// bring the same refusal at once, in a loop).
			select {
			case <-f.held.released():
			case <-ctx.Done():
				return
			}
		}
		if time.Now().After(checkAt) || r.suspectWaits {
			f.giveBackOrphans(ctx)
			checkAt = time.Now().Add(f.heartbeat)
		}
	}
}

// room returns how many tasks of limited functions the worker could start
// now: Concurrency less what it holds. A limited task is never taken ahead
// to wait in the prefetch, where it would hold its limit's room unrun.
func (f *fetcher) room() int { return max(0, f.concurrency-f.held.size()) }

// handOut hands a round's tasks to the executors; it reports false if ctx
// ended.
//
// A suspect (a task lost wire.SuspectAfter times: maybe a poison pill)
// comes alone in its take, to a worker that holds nothing else (take.lua).
// Nothing more is taken until it is reported, so nothing else the worker
// holds dies with it: a poison pill costs an innocent task at most the
// attempts it lost when it shared a worker with the pill in the pill's
// runs before it was a suspect (two). A round that left a suspect
// for want of an empty worker is followed by a wait until it holds nothing
// (and, by fetch, a give-back of orphans), then another take.
func (f *fetcher) handOut(ctx context.Context, r round) bool {
	if !f.hand(ctx, r.taken) && !r.suspectWaits {
		f.orphanWait.Reset()
		return true
	}
	select {
	case <-f.held.emptied():
	case <-ctx.Done():
		return false
	}
	if !r.suspectWaits { // it took the suspect, and reported it
		f.orphanWait.Reset()
		return true
	}
	// The worker held nothing by its ledger already and took nothing, yet
	// was refused the suspect: orphans in Redis (a lost reply) were the
	// reason. fetch gives them back; wait before the next try, in case that
	// fails. (A round that took tasks before it met the suspect was refused
	// for those: no wait. Waiting then, with a delay that grew to 2 s and
	// was never reset while suspects waited behind other work, slowed every
	// worker to a task or two every 2 s in make chaos-cluster.)
	if r.holding == 0 && len(r.taken) == 0 {
		return f.orphanWait.Wait(ctx)
	}
	return true
}

// hand records taken tasks as held and hands them to the executors. It
// reports whether a suspect was among them. Before a suspect runs, the
// worker gives back the tasks Redis says it holds but it never received (a
// take on another shard whose reply was lost): nothing but the suspect may
// be held when it runs.
func (f *fetcher) hand(ctx context.Context, taken []wire.Taken) (suspect bool) {
	f.held.add(taken)
	for _, t := range taken {
		suspect = suspect || t.Suspect()
	}
	if suspect && len(f.source.shards()) > 1 {
		f.giveBackOrphans(ctx)
	}
	now := time.Now()
	for _, t := range taken {
		f.jobs <- job{Taken: t, takenAt: now}
	}
	return suspect
}

// giveBackOrphans puts back tasks that Redis says the worker holds but that
// its ledger does not have: those of a take whose reply was lost on a
// dropped connection. It looks at every shard.
func (f *fetcher) giveBackOrphans(ctx context.Context) {
	members, err := f.source.held(ctx)
	if err != nil {
		f.failed("read held tasks", err)
		return
	}
	orphans := make(map[int][]string)
	for i, ms := range members {
		if o := f.held.orphans(ms); len(o) > 0 {
			orphans[i] = o
		}
	}
	if len(orphans) == 0 {
		return
	}
	n, err := f.source.giveBack(ctx, orphans, false)
	f.counters.givenBack.Add(int64(n))
	if err != nil {
		f.failed("give back orphaned tasks", err)
		return
	}
	if n > 0 { // none: each had ended or been reaped meanwhile, nothing to say
		f.log.Info("gave back tasks held but never received", "tasks", n)
	}
}

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
	// abandon is told of each job abandoned, and whether it was cancelled
	// for a backup's race it lost; it returns what to call if the job
	// returns at last (Worker.abandonTask).
	abandon func(ctx context.Context, t wire.Taken, outrun bool) (returned func())
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
// before running it, that its batch still wants it: as long as an answer
// holds (recheckAfter), far past the wait the prefetch plans (about
// prefetchBound of work a slot ahead of it), so that only a task held up
// past it (by tasks ahead that ran much longer than their average) costs a
// round trip more than its wait. A cancelled batch's task taken ahead may
// then run for nothing, its result discarded: at most about the prefetch's
// work a slot. A check of every task that waited over 1 ms cost Redis an
// HEXISTS a task and a round trip for every few: with 64 workers of 1 ms
// tasks, a third of the round trips (bench -scenario scale); 20 ms still
// checked most 10 ms tasks on a loaded machine, whose waits run past the
// plan.
const staleAfter = recheckAfter

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
	if tctx.Err() != nil || d.Withdrawn { // cancelled by the maintainer, or withdrawn
		end()
		e.drop(j)
		return true
	}
	e.results <- d
	end()
	return true
}

// drop forgets a job whose result nobody wants.
func (e *executors) drop(j job) {
	e.held.release(j.ID)
	e.counters.discarded.Add(1)
}

// execute runs one task and returns its encoded result: it resolves the task
// (decode, function, constant), runs the function over its elements, and
// encodes what came out. It never fails: a task that cannot be resolved or
// run yields a result saying why, so its manager learns of it and the worker
// carries on.
//
// A panic anywhere on that path outside the function (whose own panics
// fail their element) fails the task whole, with the stage it happened in
// and the stack, and the worker goes on: bytes in Redis that some check
// missed must cost one task, not the process, and a poison task must not
// kill a worker per attempt.
func (w *Worker) execute(ctx context.Context, t wire.Taken) (done wire.Done) {
	stage := codec.KindDecode
	span := tracing.NoSpan
	var c resolved
	defer func() {
		if p := recover(); p != nil {
			stack := string(debug.Stack())
			w.log.ErrorContext(ctx, "a task's path panicked outside its function; the task fails", "task", t.ID, "while", stage.String(), "panic", p, "stack", stack)
			w.counters.failed.Add(1)
			fn, label := w.metricName(c.task.Func), stageLabel(c.task.Call.Stage)
			w.perFunc.ran(fn, label, c.task.Count, false)
			w.perFunc.failedIn(fn, label, c.task.Count, []codec.Failure{{Index: -1}})
			res := &codec.Result{Task: t.ID, Attempt: t.Attempt, Fails: []codec.Failure{{Index: -1, Kind: stage,
				Msg: fmt.Sprintf("worker %s panicked in its %s step: %v", w.opts.ID, stage, p), Stack: truncate(stack, maxStack)}},
				Worker: w.opts.ID}
			b, _ := codec.EncodeResult(res) // small and well-formed: cannot fail
			span.End()
			done = wire.Done{ID: t.ID, Result: b, Shard: t.Shard}
		}
	}()
	res := &codec.Result{Task: t.ID, Attempt: t.Attempt}
	start := time.Now()
	if engine.Logger(ctx) != w.log { // the executors' context carries it already
		ctx = engine.WithLogger(ctx, w.log) // for redmap.Logger
	}
	task, fail := w.decode(t)
	if fail == nil {
		c.task = *task
		if !task.Call.IsZero() { // what the call says of its batch, on each line the function logs
			ctx = engine.WithLogger(ctx, engine.Logger(ctx).With(task.Call.LogArgs()...))
		}
		if len(task.Trace) > 0 {
			ctx, span = w.startSpan(ctx, t, task)
		}
		fail = w.resolve(ctx, t, &c)
	}
	if fail != nil {
		res.Fails = []codec.Failure{*fail}
	} else {
		if span.IsRecording() {
			c.policy.OnRetry = retryEvent(span, c.policy.OnRetry)
			c.policy.OnWait = waitEvent(span, c.policy.OnWait)
		}
		stage = codec.KindPanic
		if len(c.task.Shuffle) > 0 {
			res.Values, res.Fails = w.shuffle(ctx, &c, t)
			if c.withdrawn {
				span.End()
				return wire.Done{ID: t.ID, Shard: t.Shard, Withdrawn: true}
			}
		} else {
			res.Values, res.Fails = c.h.Run(ctx, c.constant, c.task.Count, c.task.Input, c.policy, c.reducer)
		}
	}
	stage = codec.KindEncode
	elapsed := time.Since(start)
	res.Nanos = elapsed.Nanoseconds()
	fn := w.metricName(c.task.Func)
	label := stageLabel(c.task.Call.Stage)
	w.perFunc.duration.WithLabelValues(fn, label).Observe(elapsed.Seconds())
	if ctx.Err() == nil {
		// Else its batch was cancelled (or its manager is gone): the
		// function failing with "context canceled" is not its failure,
		// and the result will be discarded.
		w.count(t.ID, &c, res.Fails, fn, label)
	}
	solo := w.solo(ctx, t, task)
	res.Recorded = solo != nil
	if len(res.Fails) > 0 || len(c.stepFails) > 0 || t.Backup {
		res.Worker = w.opts.ID // for operators: who failed its elements, or ran a backup
	}
	res.Backup = t.Backup // its manager counts the races its backups won
	b, err := codec.EncodeResult(res)
	if err == nil && len(b) > w.opts.MaxFrame {
		err = fmt.Errorf("%w (worker.Options.MaxFrame raises the limit)", &codec.SizeError{What: "result", Size: len(b), Limit: w.opts.MaxFrame})
	}
	if err != nil {
		kind := codec.KindEncode
		if errors.Is(err, codec.ErrTooLarge) {
			kind = codec.KindTooLarge
		}
		res = &codec.Result{Task: t.ID, Attempt: t.Attempt, Fails: []codec.Failure{{Index: -1, Kind: kind, Msg: err.Error()}},
			Recorded: solo != nil, Worker: w.opts.ID, Backup: t.Backup}
		b, _ = codec.EncodeResult(res) // small and well-formed: cannot fail
	}
	endSpan(span, c.task.Count, res.Fails)
	done = wire.Done{ID: t.ID, Result: b, Shard: t.Shard}
	if solo != nil {
		done.Record = wire.EncodeRecord(wire.Complete(solo.Record, c.task.Count, res.Fails, time.Now().UnixMilli()))
		done.Keep, done.AgeMs = solo.Keep, solo.AgeMs
	}
	return done
}

// count counts task tid, resolved as c, as succeeded or failed (fails:
// its elements that failed), under metric name fn and stage label label. A
// pipeline's elements that failed in a step count as the task's own
// failures do, under the function of that step.
func (w *Worker) count(tid string, c *resolved, fails []codec.Failure, fn, label string) {
	if len(fails) == 0 && len(c.stepFails) == 0 {
		w.counters.succeeded.Add(1)
		w.perFunc.ran(fn, label, c.task.Count, true)
		return
	}
	w.counters.failed.Add(1)
	w.perFunc.ran(fn, label, c.task.Count, false)
	for _, f := range append([]funcFails{{c.task.Func, fails}}, c.stepFails...) {
		w.failures.Note(f.fn, tid, f.fails)
		w.perFunc.failedIn(w.metricName(f.fn), label, c.task.Count, f.fails)
	}
}

// decode decodes task t's envelope; one that does not decode fails whole,
// with the reason.
func (w *Worker) decode(t wire.Taken) (*codec.Task, *codec.Failure) {
	task, err := codec.DecodeTask(t.Payload, w.opts.MaxFrame)
	if errors.Is(err, codec.ErrTooLarge) {
		return nil, wholeFailure(codec.KindTooLarge, "task: %v", err)
	}
	if err != nil {
		return nil, wholeFailure(codec.KindDecode, "task: %v", err)
	}
	return task, nil
}
