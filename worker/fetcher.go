package worker

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/redmap/redmap/internal/backoff"
	"github.com/redmap/redmap/internal/rdb"
)

// fetcher takes tasks from the queue and hands them to the executors: as many
// per round trip as there are free slots, the worker's private list first;
// while there are none, it blocks on its bell with the next take pipelined
// behind the wait (WaitTake), so that a wake-up brings its tasks along. It stops when the worker's
// context ends or an operator drains it, and then closes jobs.
//
// A queue of several shards (manager.Options.Shards) is served fairly: each
// take starts at the shard after the one that gave tasks last, and skips
// the shards the worker waits on (their last take left them empty). A bell
// listener per shard waits for the rings of those shards, since one BLPOP
// cannot wait on keys of different Cluster slots.
type fetcher struct {
	w      *Worker
	slots  *slots
	jobs   chan job
	ctx    context.Context // ends when the fetcher is to stop
	cancel context.CancelFunc
	bg     context.Context // outlives ctx: to ring the bell at stop
	done   chan struct{}

	wake      chan struct{} // a listener heard a bell ring
	mu        sync.Mutex
	rung      map[int]bool // the shards whose bells rang since the fetcher last looked
	listeners sync.WaitGroup
	listening int // shards with a listener; owned by the fetch loop

	// Owned by the fetch loop:
	// waiting[i]: the last take of shard i left it empty and registered the
	// worker idle there; the next take of it waits for its bell first.
	waiting    []bool
	next       int             // the shard to try first
	orphanWait backoff.Backoff // between takes refused a suspect for orphans
}

// job is a taken task, and when it was taken.
type job struct {
	rdb.Taken
	takenAt time.Time
}

func newFetcher(w *Worker, ctx, bg context.Context, s *slots, capacity int) *fetcher {
	f := &fetcher{w: w, slots: s, jobs: make(chan job, capacity), bg: bg, done: make(chan struct{}),
		wake: make(chan struct{}, 1), rung: make(map[int]bool)}
	f.ctx, f.cancel = context.WithCancel(ctx)
	return f
}

// start starts taking tasks.
func (f *fetcher) start() {
	// Once stopped, ring the worker's own bells, so that a blocking wait for
	// work returns now rather than at its timeout.
	rang := make(chan struct{})
	unring := context.AfterFunc(f.ctx, func() {
		defer close(rang)
		f.w.draining.Store(true)
		rctx, cancel := context.WithTimeout(f.bg, time.Second)
		defer cancel()
		for _, r := range f.w.shards() {
			_ = r.RingStop(rctx, f.w.opts.ID)
		}
	})
	go func() {
		defer close(f.done)
		defer close(f.jobs)
		f.fetch()
		if !unring() {
			<-rang
		}
		f.listeners.Wait()
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
	for ctx.Err() == nil {
		shards := w.shards()
		if !f.await(shards) {
			return
		}
		free := f.slots.acquire(ctx)
		if free == 0 {
			return
		}
		r := f.take(shards, free)
		f.slots.release(free - len(r.taken))
		w.grow(ctx, shards[0].Shards()) // a take of shard 0 says when managers use more
		if r.err != nil {
			if ctx.Err() != nil {
				return
			}
			w.failed("take", r.err)
			if !bo.Wait(ctx) {
				return
			}
			continue
		}
		bo.Reset()
		w.counters.taken.Add(int64(len(r.taken)))
		if !f.handOut(r) {
			return
		}
		if time.Now().After(checkAt) || r.suspectWaits {
			f.giveBackOrphans(ctx)
			checkAt = time.Now().Add(w.opts.Heartbeat)
		}
	}
}

// await waits, on a queue of several shards, while the worker waits on
// every shard, for a bell to ring or IdleWait to pass (starting listeners
// for new shards); it reports false if the fetcher stopped. A queue of one
// shard waits in its take instead (WaitTake).
func (f *fetcher) await(shards []*rdb.RDB) bool {
	for len(f.waiting) < len(shards) {
		f.waiting = append(f.waiting, false)
	}
	if len(shards) == 1 {
		return true
	}
	f.listen(shards)
	f.heard(f.waiting)
	if !slices.Contains(f.waiting, false) {
		if !f.sleep() {
			return false
		}
		if !f.heard(f.waiting) {
			clear(f.waiting) // the wait timed out: look at every shard
		}
	}
	return true
}

// round is what one round of takes brought.
type round struct {
	taken        []rdb.Taken
	err          error // the first take that failed, if none gave tasks
	suspectWaits bool  // a take left a suspect for when the worker holds nothing
	holding      int   // what the worker held by its ledger at the last take
}

// take takes up to free tasks from the first shard that gives some,
// starting at the one after the shard that gave tasks last, skipping those
// the worker waits on.
func (f *fetcher) take(shards []*rdb.RDB, free int) (r round) {
	w, ctx := f.w, f.ctx
	for tries := 0; tries < len(shards) && len(r.taken) == 0; tries++ {
		i := (f.next + tries) % len(shards)
		if f.waiting[i] && len(shards) > 1 {
			continue
		}
		var end rdb.TakeEnd
		var err error
		r.holding = w.held.size()
		if f.waiting[i] {
			r.taken, end, err = shards[i].WaitTake(ctx, w.opts.ID, free, w.opts.Lease, w.opts.IdleWait, r.holding)
		} else {
			r.taken, end, err = shards[i].Take(ctx, w.opts.ID, free, w.opts.Lease, r.holding)
		}
		if err != nil {
			// Try the other shards (on a Cluster, another master may
			// answer), and this one first again no sooner than after them.
			r.err = cmp.Or(r.err, err)
			f.next = (i + 1) % len(shards)
			continue
		}
		// A take that left the shard empty registered the worker idle
		// there: the next take of it waits for its bell (a take now would
		// find nothing).
		f.waiting[i] = end.Drained
		r.suspectWaits = r.suspectWaits || end.Suspect
		if len(r.taken) > 0 {
			f.next, r.err = (i+1)%len(shards), nil
		}
	}
	return r
}

// handOut hands a round's tasks to the executors; it reports false if the
// fetcher stopped.
//
// A suspect (a task lost before: maybe a poison pill) comes alone in its
// take, to a worker that holds nothing else (take.lua). Nothing more is
// taken until it is reported, so nothing else the worker holds dies with
// it: a poison pill costs an innocent task at most the one attempt it lost
// when it first shared a worker with the pill. A round that left a suspect
// for want of an empty worker is followed by a wait until it holds nothing
// (and, by fetch, a give-back of orphans), then another take.
func (f *fetcher) handOut(r round) bool {
	w, ctx := f.w, f.ctx
	if !f.hand(ctx, r.taken) && !r.suspectWaits {
		f.orphanWait.Reset()
		return true
	}
	if w.hooks.emptying != nil {
		w.hooks.emptying()
	}
	select {
	case <-w.held.emptied():
	case <-ctx.Done():
		return false
	}
	if !r.suspectWaits { // it took the suspect, and reported it
		f.orphanWait.Reset()
		return true
	}
	// The worker held nothing by its ledger already, yet was refused the
	// suspect: orphans in Redis (a lost reply) were the reason. fetch gives
	// them back; wait before the next try, in case that fails.
	if r.holding == 0 {
		return f.orphanWait.Wait(ctx)
	}
	return true
}

// listen starts a bell listener for each of shards that has none.
func (f *fetcher) listen(shards []*rdb.RDB) {
	for ; f.listening < len(shards); f.listening++ {
		r := shards[f.listening]
		f.listeners.Go(func() { f.listenTo(r) })
	}
}

// listenTo waits for the rings of shard r's bell until the fetcher stops
// (which rings it), and tells the fetch loop of each.
func (f *fetcher) listenTo(r *rdb.RDB) {
	var bo backoff.Backoff
	for f.ctx.Err() == nil {
		rang, err := r.WaitBell(f.ctx, f.w.opts.ID, f.w.opts.IdleWait)
		if err != nil {
			if f.ctx.Err() == nil {
				f.w.failed("wait", err)
				bo.Wait(f.ctx)
			}
			continue
		}
		bo.Reset()
		if rang {
			f.mu.Lock()
			f.rung[r.Shard()] = true
			f.mu.Unlock()
			select {
			case f.wake <- struct{}{}:
			default:
			}
		}
	}
}

// heard marks the shards whose bells rang since it was last called as no
// longer waited on, and reports whether there were any.
func (f *fetcher) heard(waiting []bool) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	rang := len(f.rung) > 0
	for i := range f.rung {
		if i < len(waiting) {
			waiting[i] = false
		}
	}
	clear(f.rung)
	return rang
}

// sleep waits, while the worker waits on every shard, for a bell to ring or
// IdleWait to pass; it reports false if the fetcher stopped.
func (f *fetcher) sleep() bool {
	t := time.NewTimer(f.w.opts.IdleWait)
	defer t.Stop()
	select {
	case <-f.wake:
	case <-t.C:
	case <-f.ctx.Done():
		return false
	}
	return true
}

// hand records taken tasks as held and hands them to the executors. It
// reports whether a suspect was among them. Before a suspect runs, the
// worker gives back the tasks Redis says it holds but it never received (a
// take on another shard whose reply was lost): nothing but the suspect may
// be held when it runs.
func (f *fetcher) hand(ctx context.Context, taken []rdb.Taken) (suspect bool) {
	f.w.held.add(taken)
	for _, t := range taken {
		suspect = suspect || t.Attempt > 0
	}
	if suspect && len(f.w.shards()) > 1 {
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
	w := f.w
	for _, r := range w.shards() {
		members, err := r.Held(ctx, w.opts.ID)
		if err != nil {
			w.failed("read held tasks", err)
			return
		}
		orphans := w.held.orphans(members)
		if len(orphans) == 0 {
			continue
		}
		n, err := r.GiveBack(ctx, w.opts.ID, orphans)
		if err != nil {
			w.failed("give back orphaned tasks", err)
			return
		}
		w.counters.givenBack.Add(int64(n))
		w.log.Info("gave back tasks held but never received", "tasks", n, "shard", r.Shard())
	}
}
