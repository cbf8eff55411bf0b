package worker

import (
	"context"
	"time"

	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/rdb"
)

// fetcher takes tasks from the queue and hands them to the executors: as many
// per round trip as there are free slots, the worker's private list first;
// while there are none, it blocks on its bell with the next take pipelined
// behind the wait (WaitTake), so that a wake-up brings its tasks along. It stops when the worker's
// context ends or an operator drains it, and then closes jobs.
type fetcher struct {
	w      *Worker
	slots  *slots
	jobs   chan job
	ctx    context.Context // ends when the fetcher is to stop
	cancel context.CancelFunc
	bg     context.Context // outlives ctx: to ring the bell at stop
	done   chan struct{}
}

// job is a taken task, and when it was taken. ran, if not nil, is closed
// once the task has run or been skipped: the fetcher waits on it for a
// suspect.
type job struct {
	rdb.Taken
	takenAt time.Time
	ran     chan struct{}
}

func newFetcher(w *Worker, ctx, bg context.Context, s *slots, capacity int) *fetcher {
	f := &fetcher{w: w, slots: s, jobs: make(chan job, capacity), bg: bg, done: make(chan struct{})}
	f.ctx, f.cancel = context.WithCancel(ctx)
	return f
}

// start starts taking tasks.
func (f *fetcher) start() {
	// Once stopped, ring the worker's own bell, so that a blocking wait for
	// work returns now rather than at its timeout.
	rang := make(chan struct{})
	unring := context.AfterFunc(f.ctx, func() {
		defer close(rang)
		f.w.draining.Store(true)
		rctx, cancel := context.WithTimeout(f.bg, time.Second)
		defer cancel()
		_ = f.w.rdb.RingStop(rctx, f.w.opts.ID)
	})
	go func() {
		defer close(f.done)
		defer close(f.jobs)
		f.fetch()
		if !unring() {
			<-rang
		}
	}()
}

// stop makes the fetcher take no more tasks: the worker drains.
func (f *fetcher) stop() { f.cancel() }

// wait returns once the fetcher has stopped and closed jobs.
func (f *fetcher) wait() { <-f.done }

// stopped reports whether the fetcher was told to stop.
func (f *fetcher) stopped() bool { return f.ctx.Err() != nil }

// fetch takes tasks until the fetcher stops. Every Heartbeat it also gives
// back orphans (see giveBackOrphans); it does so here, between takes, so that
// no take is in flight while it compares.
func (f *fetcher) fetch() {
	w, ctx := f.w, f.ctx
	var bo backoff.Backoff
	checkAt := time.Now().Add(w.opts.Heartbeat)
	idle := false // the last take left the queue empty: wait for the bell first
	for ctx.Err() == nil {
		free := f.slots.acquire(ctx)
		if free == 0 {
			return
		}
		var taken []rdb.Taken
		var drained bool
		var err error
		if idle {
			taken, drained, err = w.rdb.WaitTake(ctx, w.opts.ID, free, w.opts.Lease, w.opts.IdleWait)
		} else {
			taken, drained, err = w.rdb.Take(ctx, w.opts.ID, free, w.opts.Lease)
		}
		f.slots.release(free - len(taken))
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
		if suspect := f.hand(taken); suspect != nil {
			// A suspect (a task lost before: maybe a poison pill) comes
			// alone in its take, and runs alone. Taking nothing more until
			// it has run means no other suspect waits in this worker's
			// prefetch meanwhile, to die with it: a poison pill costs an
			// innocent task at most the one attempt it lost when it first
			// shared a worker with the pill.
			select {
			case <-suspect:
			case <-ctx.Done():
				return
			}
		}
		if time.Now().After(checkAt) {
			f.giveBackOrphans(ctx)
			checkAt = time.Now().Add(w.opts.Heartbeat)
		}
		// A take that left the queue empty registered the worker idle:
		// the next one waits for its bell (a take now would find nothing).
		idle = drained
	}
}

// hand records taken tasks as held and hands them to the executors. It
// returns the channel closed once the suspect among them has run, if any.
func (f *fetcher) hand(taken []rdb.Taken) (suspect chan struct{}) {
	f.w.held.add(taken)
	now := time.Now()
	for _, t := range taken {
		j := job{Taken: t, takenAt: now}
		if t.Attempt > 0 {
			suspect = make(chan struct{})
			j.ran = suspect
		}
		f.jobs <- j
	}
	return suspect
}

// giveBackOrphans puts back tasks that Redis says the worker holds but that
// its ledger does not have: those of a take whose reply was lost on a
// dropped connection.
func (f *fetcher) giveBackOrphans(ctx context.Context) {
	w := f.w
	members, err := w.rdb.Held(ctx, w.opts.ID)
	if err != nil {
		w.failed("read held tasks", err)
		return
	}
	orphans := w.held.orphans(members)
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
